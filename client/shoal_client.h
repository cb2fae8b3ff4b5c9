// The CLI's view of shoald: one call per RPC, gRPC errors converted to Status in one place.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "shared/status.h"
#include "shoal/v1/shoal.grpc.pb.h"

namespace shoal::cli {

// Where and how to reach shoald: its unix socket, or a TCP target with TLS (or plaintext on
// loopback) and a bearer token sent with every call.
struct Endpoint {
  std::string socket;
  std::string target;                     // host:port; empty: the socket
  std::string tls_ca, tls_cert, tls_key;  // PEM texts: the server's CA; a client pair (mTLS)
  std::string token;
  bool insecure = false;    // plaintext TCP (loopback)
  int call_timeout_s = 30;  // every call but Watch
  // > 0: ping the connection this often (ms) and give it up after as long without an answer, so a
  // dead peer or a cut link ends a Watch within about twice this (shoald's peers: 2000).
  int keepalive_ms = 0;
};

class ShoalClient {
 public:
  explicit ShoalClient(const Endpoint& endpoint);

  StatusOr<v1::NodeInfoResponse> NodeInfo();
  StatusOr<std::string> Submit(const v1::ExperimentSpec& spec);
  // Streams the file at `path` to shoald in chunks; where it stored it ("sha256:<hex>").
  StatusOr<v1::StoredFile> Upload(const std::string& path);
  StatusOr<v1::Experiment> Get(const std::string& id);
  // Every page, `page_size` records a call (0: the daemon's default).
  // `filter`: a ListRequest holding only filter fields (state, kind, submitter, mine).
  StatusOr<std::vector<v1::Experiment>> List(uint32_t page_size = 0,
                                             const v1::ListRequest& filter = {});
  StatusOr<v1::Experiment> Cancel(const std::string& id);
  StatusOr<std::string> SubmitSweep(const v1::SweepSpec& spec);
  StatusOr<v1::SweepReport> GetSweep(const std::string& id);
  StatusOr<std::vector<v1::Sweep>> ListSweeps();
  StatusOr<v1::Sweep> CancelSweep(const std::string& id);
  StatusOr<std::vector<v1::Sample>> Samples(const std::string& id);
  StatusOr<v1::LogsResponse> Logs(const std::string& id, uint64_t offset);
  // The ended experiment's trace (Chrome trace-event JSON), as the daemon renders it.
  StatusOr<std::string> Trace(const std::string& id);
  StatusOr<v1::DeleteResponse> Delete(const std::string& id);
  StatusOr<v1::DeleteResponse> Prune(const v1::PruneRequest& req);
  // Calls `on_event` for every event until the experiment ends.
  Status Watch(const std::string& id, const std::function<void(const v1::WatchEvent&)>& on_event);
  // Ends every Watch in progress (CANCELLED) and makes later ones end at once.
  void CancelWatches();

 private:
  Status Convert(const grpc::Status& st) const;
  template <typename Resp, typename Item, typename Call, typename Items>
  StatusOr<std::vector<Item>> AllPages(v1::ListRequest req, uint32_t page_size, Call call,
                                       Items items);

  std::unique_ptr<grpc::ClientContext> Ctx() const;

  std::string where_;  // for messages: the socket or the target
  std::string token_;
  int call_timeout_s_;
  std::mutex watches_mu_;
  std::set<grpc::ClientContext*> watches_;
  bool watches_cancelled_ = false;
  std::unique_ptr<v1::Shoal::StubInterface> stub_;
};

}  // namespace shoal::cli
