// Experiments that span several nodes, federated from this daemon (spec.node_daemons). Each
// node's shoald runs its part as an ordinary experiment; this daemon submits the parts, relays
// their telemetry labelled by node, keeps one record of the whole, and when one part ends badly
// or its daemon cannot be reached, cancels every other part and says why. It speaks to the peers
// through PeerDaemon (gRPC over TCP with TLS and a token: server/rpc/peer_daemon.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

class PeerDaemon {
 public:
  virtual ~PeerDaemon() = default;
  virtual StatusOr<std::string> Submit(const v1::ExperimentSpec& spec) = 0;
  virtual StatusOr<v1::Experiment> Get(const std::string& id) = 0;
  virtual StatusOr<v1::Experiment> Cancel(const std::string& id) = 0;
  // Calls `on_event` with each of the experiment's events until it ends, the stream breaks or
  // Interrupt is called; the status says which.
  virtual Status Watch(const std::string& id,
                       const std::function<void(const v1::WatchEvent&)>& on_event) = 0;
  // Ends a Watch in progress, and every later one at once (any thread).
  virtual void Interrupt() = 0;
};

// A connection to the shoald at HOST:PORT; an error when this daemon may not reach it so.
using PeerConnector =
    std::function<StatusOr<std::unique_ptr<PeerDaemon>>(const std::string& daemon)>;

struct FederationOptions {
  uint64_t lost_after_ms = 10000;   // a part whose daemon cannot be reached this long is lost
  uint64_t poll_ms = 500;           // retry and refresh interval
  uint64_t settle_ms = 30000;       // after cancelling: how long the other parts may take to end
  uint64_t max_kept_samples = 512;  // per part, in this daemon's store (SampleKeeper)
};

// What a federated run does to the rest of the daemon.
struct FederationHooks {
  std::function<void(const v1::Experiment&)> update;   // store it and tell the listeners
  std::function<void(const v1::Experiment&)> live;     // the live copy only
  std::function<void(const v1::WatchEvent&)> publish;  // to the record's watchers
  std::function<void(const v1::Sample&)> sample;       // a part's sample (node set), to keep
  std::function<void(uint32_t node)> thin_samples;     // halve what was kept of that node's
  std::function<void(const std::string&)> event;       // a text event, stored and published
  std::function<int()> stop;  // ExperimentQueue::Stop: none, cancel or shutdown asked
};

// Runs a federated experiment (its record has its parts' nodes and daemons) from submitting
// the parts to its end, and leaves the final record with `hooks.update`. Blocks.
void RunFederated(v1::Experiment e, const PeerConnector& connect, const FederationOptions& opts,
                  const FederationHooks& hooks);

// Cancels whatever parts of `e` may still run (a federating daemon that stopped mid-run); best
// effort, each peer given its connection's call timeout.
void CancelParts(const v1::Experiment& e, const PeerConnector& connect);

// The record of a newly submitted federated experiment: running, one part per daemon.
v1::Experiment NewFederatedRecord(const std::string& id, const v1::ExperimentSpec& spec,
                                  const std::vector<std::string>& daemons, int64_t now_ms);

}  // namespace shoal
