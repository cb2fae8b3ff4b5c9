#include "server/federation.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "server/experiment_queue.h"
#include "server/sample_keeper.h"
#include "server/sweep_tracker.h"
#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/os/process.h"
#include "shared/spec/sweep.h"
#include "spdlog/spdlog.h"

namespace shoal {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

v1::Experiment NewFederatedRecord(const std::string& id, const v1::ExperimentSpec& spec,
                                  const std::vector<std::string>& daemons, int64_t now_ms) {
  v1::Experiment e = NewExperimentRecord(id, spec, now_ms);
  e.set_state(v1::RUNNING);  // it holds no place in this daemon's queue; its parts queue there
  e.set_started_unix_ms(now_ms);
  for (size_t i = 0; i < daemons.size(); ++i) {
    v1::NodePart* p = e.add_parts();
    p->set_node_rank(uint32_t(i));
    p->set_daemon(daemons[i]);
    p->set_state(v1::QUEUED);
  }
  return e;
}

namespace {

std::string Seconds(uint64_t ms) {
  std::ostringstream o;
  o << double(ms) / 1000;  // 0.3, 10
  return o.str();
}

std::string Label(const v1::NodePart& p) {
  return "node " + std::to_string(p.node_rank()) + " (" + p.daemon() + ")";
}

// One part as the run knows it.
struct PartView {
  std::unique_ptr<PeerDaemon> peer;
  std::string id, label;  // its experiment on that daemon; "node N (HOST:PORT)", fixed at submit
  std::optional<v1::Experiment> record;  // its last reading
  bool ended = false;                    // record is final
  std::string lost;                      // why its daemon was given up ("" while reachable)
  // When this daemon saw it end, or saw its daemon's stream break (one clock: ours), and in
  // what order: the error tells the first trouble first.
  int64_t trouble_unix_ms = 0;
  uint64_t seq = 0;
  SteadyClock::time_point read_at{};     // its watcher's last Get for the live record
  std::unique_ptr<SampleKeeper> keeper;  // which of its samples this daemon stores
  bool settled() const { return ended || !lost.empty(); }
  bool bad() const { return !lost.empty() || (ended && record->state() != v1::SUCCEEDED); }
};

class FederatedRun {
 public:
  FederatedRun(v1::Experiment e, const FederationOptions& opts, const FederationHooks& hooks)
      : e_(std::move(e)), opts_(opts), hooks_(hooks), parts_(size_t(e_.parts_size())) {}

  void Run(const PeerConnector& connect);

 private:
  bool Connect(const PeerConnector& connect);
  bool SubmitParts();
  void Watch(size_t node);
  void Relay(size_t node, const v1::WatchEvent& ev, v1::ExperimentState* last);
  bool AwaitRecord(size_t node, int64_t trouble_ms);
  void Read(size_t node);
  int Supervise();
  void CancelAll();
  void AwaitSettled();
  void Finish(int stop);
  std::string Reasons();
  void Fail(const std::string& error);
  void End(v1::ExperimentState state, const std::string& error);
  void PublishLive();
  bool Sleep(uint64_t ms);  // false once the run is over

  v1::Experiment e_;
  const FederationOptions& opts_;
  const FederationHooks& hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PartView> parts_;
  bool over_ = false;  // watchers stop
  uint64_t seq_ = 0;
};

void FederatedRun::Run(const PeerConnector& connect) {
  if (!Connect(connect) || !SubmitParts()) return;
  std::vector<std::thread> watchers;
  for (size_t i = 0; i < parts_.size(); ++i) watchers.emplace_back([this, i] { Watch(i); });
  const int stop = Supervise();
  {
    std::lock_guard<std::mutex> l(mu_);
    over_ = true;
  }
  cv_.notify_all();
  for (auto& p : parts_) p.peer->Interrupt();
  for (auto& w : watchers) w.join();
  Finish(stop);
}

bool FederatedRun::Connect(const PeerConnector& connect) {
  for (size_t i = 0; i < parts_.size(); ++i) {
    auto peer = connect(e_.parts(int(i)).daemon());
    if (!peer.ok()) {
      Fail(Label(e_.parts(int(i))) + ": " + peer.status().message());
      return false;
    }
    parts_[i].peer = std::move(peer).value();
  }
  return true;
}

// Node by node, node 0 first; a refusal, a cancel or shoald's shutdown cancels the parts
// already accepted.
bool FederatedRun::SubmitParts() {
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (const int stop = hooks_.stop(); stop != ExperimentQueue::kNone) {
      CancelAll();
      if (stop == ExperimentQueue::kCancel) End(v1::CANCELLED, "");
      if (stop == ExperimentQueue::kShutdown)
        End(v1::INTERRUPTED,
            "shoald stopped while submitting the parts; those submitted were "
            "cancelled");
      return false;
    }
    v1::NodePart* part = e_.mutable_parts(int(i));
    auto id = parts_[i].peer->Submit(PartSpec(e_.spec(), e_.id(), part->node_rank()));
    if (!id.ok()) {
      CancelAll();
      Fail(Label(*part) + " did not take its part: " + id.status().message());
      return false;
    }
    part->set_experiment_id(*id);
    parts_[i].id = *id;
    parts_[i].label = Label(*part);
    parts_[i].keeper = std::make_unique<SampleKeeper>(
        hooks_.sample,
        [this, i] {
          if (hooks_.thin_samples) hooks_.thin_samples(uint32_t(i));
        },
        opts_.max_kept_samples);
    hooks_.event(parts_[i].label + ": part " + *id + " submitted");
  }
  hooks_.update(e_);
  return true;
}

// One part's watcher: relays its events until it ends; when the stream breaks, reads its record
// until it answers or has not for lost_after_ms.
void FederatedRun::Watch(size_t node) {
  const std::string& id = parts_[node].id;
  v1::ExperimentState last = v1::STATE_UNSPECIFIED;
  for (;;) {
    (void)parts_[node].peer->Watch(id, [&](const v1::WatchEvent& ev) { Relay(node, ev, &last); });
    if (!AwaitRecord(node, RealtimeMs())) return;
    if (!Sleep(opts_.poll_ms)) return;  // no tight loop when a stream keeps breaking
  }
}

void FederatedRun::Relay(size_t node, const v1::WatchEvent& ev, v1::ExperimentState* last) {
  const std::string& label = parts_[node].label;
  if (ev.has_sample()) {
    v1::WatchEvent out;
    *out.mutable_sample() = ev.sample();
    out.mutable_sample()->set_node(uint32_t(node));
    out.set_node(uint32_t(node));
    hooks_.publish(out);
    parts_[node].keeper->Offer(out.sample());  // only this part's watcher offers to its keeper
    Read(node);                                // the live record follows the samples
  } else if (ev.has_event()) {
    hooks_.event(label + ": " + ev.event().text());
  } else if (ev.has_state() && ev.state() != *last) {
    *last = ev.state();
    hooks_.event(label + ": " + v1::ExperimentState_Name(ev.state()));
  }
}

// After a stream ended: true to watch again (the part still runs), false when it is settled or
// the run is over. `trouble_ms`: when the stream ended, the loss's time if it comes to that.
bool FederatedRun::AwaitRecord(size_t node, int64_t trouble_ms) {
  const auto until = SteadyClock::now() + milliseconds(opts_.lost_after_ms);
  const std::string& id = parts_[node].id;
  for (;;) {
    auto r = parts_[node].peer->Get(id);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (over_) return false;
      PartView& p = parts_[node];
      const bool gone = !r.ok() && r.status().code() == Code::kNotFound;
      if (r.ok()) {
        p.record = *r;
        p.ended = IsTerminal(r->state());
        if (p.ended) p.trouble_unix_ms = RealtimeMs();
      } else if (gone || SteadyClock::now() >= until) {
        p.lost = gone ? "its part " + id + " is gone from that daemon"
                      : "its shoald has not answered for " + Seconds(opts_.lost_after_ms) + " s (" +
                            r.status().message() + ")";
        p.trouble_unix_ms = trouble_ms;
      }
      if (r.ok() || p.settled()) {
        p.seq = ++seq_;
        cv_.notify_all();
        return !p.settled();
      }
    }
    if (!Sleep(opts_.poll_ms)) return false;
  }
}

// The live record follows the part's own (its processes, its state).
void FederatedRun::Read(size_t node) {
  if (SteadyClock::now() - parts_[node].read_at < milliseconds(1000)) return;
  parts_[node].read_at = SteadyClock::now();  // only its watcher touches it
  auto r = parts_[node].peer->Get(parts_[node].id);
  if (!r.ok()) return;  // the watcher finds out if it lasts
  std::lock_guard<std::mutex> l(mu_);
  if (!parts_[node].ended) parts_[node].record = *r;
}

bool FederatedRun::Sleep(uint64_t ms) {
  std::unique_lock<std::mutex> l(mu_);
  return !cv_.wait_for(l, milliseconds(ms), [&] { return over_; });
}

// Waits until every part succeeded, one went bad, or a stop was asked; then stops the rest.
// Returns the stop asked (ExperimentQueue::Stop).
int FederatedRun::Supervise() {
  int stop = ExperimentQueue::kNone;
  for (;;) {
    stop = hooks_.stop();
    {
      std::unique_lock<std::mutex> l(mu_);
      const bool all_good = std::all_of(parts_.begin(), parts_.end(),
                                        [](const PartView& p) { return p.settled() && !p.bad(); });
      const bool any_bad =
          std::any_of(parts_.begin(), parts_.end(), [](const PartView& p) { return p.bad(); });
      if (all_good) return stop;
      if (any_bad || stop != ExperimentQueue::kNone) break;
      cv_.wait_for(l, milliseconds(opts_.poll_ms));
    }
    PublishLive();
  }
  CancelAll();
  if (stop != ExperimentQueue::kShutdown) AwaitSettled();  // a stopping daemon does not wait
  return stop;
}

// Asks every part not known to have ended to stop, all at once (a dead peer costs one timeout).
void FederatedRun::CancelAll() {
  std::vector<std::future<void>> calls;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const std::string& id = parts_[i].id;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (id.empty() || parts_[i].settled()) continue;
    }
    calls.push_back(std::async(std::launch::async, [this, i, id] {
      if (auto r = parts_[i].peer->Cancel(id); !r.ok())
        spdlog::warn("{}: cancelling {}: {}", e_.id(), id, r.status().message());
    }));
  }
  for (auto& c : calls) c.wait();
}

// Waits for every part to end or be lost, up to lost_after_ms + settle_ms, or until shoald
// stops (a shutdown is not held up for the parts' ends).
void FederatedRun::AwaitSettled() {
  const auto until = SteadyClock::now() + milliseconds(opts_.lost_after_ms + opts_.settle_ms);
  const auto settled = [&] {
    return std::all_of(parts_.begin(), parts_.end(), [](const PartView& p) { return p.settled(); });
  };
  bool shutdown = false;
  std::unique_lock<std::mutex> l(mu_);
  while (!settled() && SteadyClock::now() < until) {
    l.unlock();
    shutdown = hooks_.stop() == ExperimentQueue::kShutdown;
    l.lock();
    if (shutdown) break;
    cv_.wait_for(l, milliseconds(opts_.poll_ms), settled);
  }
  for (auto& p : parts_) {
    if (p.settled()) continue;
    p.lost = shutdown ? "still ending when shoald stopped"
                      : "still ending when the federating daemon gave up waiting";
    p.trouble_unix_ms = RealtimeMs();
  }
}

// Every part that did not succeed, the first to go wrong first.
std::string FederatedRun::Reasons() {
  std::vector<size_t> bad;
  for (size_t i = 0; i < parts_.size(); ++i)
    if (parts_[i].bad()) bad.push_back(i);
  std::stable_sort(bad.begin(), bad.end(), [&](size_t a, size_t b) {
    return std::tie(parts_[a].trouble_unix_ms, parts_[a].seq) <
           std::tie(parts_[b].trouble_unix_ms, parts_[b].seq);
  });
  std::string out;
  for (size_t i : bad) {
    const PartView& p = parts_[i];
    out += out.empty() ? "" : "; then ";
    out += p.label + ": ";
    if (!p.lost.empty()) {
      out += "lost: " + p.lost;
    } else {
      out += v1::ExperimentState_Name(p.record->state());
      if (!p.record->error().empty()) out += ": " + p.record->error();
    }
  }
  return out;
}

// The record as the parts make it: their states and processes; node 0's result (its rank 0
// saw the world: step times, the all-reduce figures).
void FederatedRun::PublishLive() {
  std::lock_guard<std::mutex> l(mu_);
  e_.clear_processes();
  e_.clear_fork_server_processes();
  for (size_t i = 0; i < parts_.size(); ++i) {
    const PartView& p = parts_[i];
    v1::NodePart* part = e_.mutable_parts(int(i));
    if (!p.record) continue;
    part->set_state(p.record->state());
    part->set_error(p.record->error());
    if (p.record->state() != v1::QUEUED) {           // a queued part has no figures yet
      if (p.record->result().has_samples_per_sec())  // unknown until it trains
        part->set_samples_per_sec(p.record->result().samples_per_sec());
      if (p.record->result().has_peak_pss_sum_bytes())
        part->set_peak_pss_sum_bytes(p.record->result().peak_pss_sum_bytes());
      if (p.record->result().has_sum_of_peak_pss_bytes())
        part->set_sum_of_peak_pss_bytes(p.record->result().sum_of_peak_pss_bytes());
    }
    for (const auto& proc : p.record->processes()) {
      v1::ProcessInfo* q = e_.add_processes();
      *q = proc;
      q->set_node(uint32_t(i));
    }
    for (const auto& proc : p.record->fork_server_processes()) {
      v1::ProcessInfo* q = e_.add_fork_server_processes();
      *q = proc;
      q->set_node(uint32_t(i));
    }
  }
  if (parts_[0].record) *e_.mutable_result() = parts_[0].record->result();
  hooks_.live(e_);
}

void FederatedRun::Finish(int stop) {
  PublishLive();
  bool all_good = true;
  for (size_t i = 0; i < parts_.size(); ++i) {
    if (!parts_[i].lost.empty()) {
      e_.mutable_parts(int(i))->set_state(v1::FAILED);
      e_.mutable_parts(int(i))->set_error("lost: " + parts_[i].lost);
    }
    all_good = all_good && !parts_[i].bad();
  }
  if (all_good) {
    End(v1::SUCCEEDED, "");
  } else if (stop == ExperimentQueue::kCancel) {
    End(v1::CANCELLED, "");
  } else if (stop == ExperimentQueue::kShutdown) {
    End(v1::INTERRUPTED, "shoald stopped while federating; its parts were cancelled");
  } else {
    End(v1::FAILED, Reasons());
  }
}

void FederatedRun::Fail(const std::string& error) { End(v1::FAILED, error); }

// The final record, stored, and its state to the watchers.
void FederatedRun::End(v1::ExperimentState state, const std::string& error) {
  e_.set_state(state);
  e_.set_error(error);
  e_.set_finished_unix_ms(RealtimeMs());
  hooks_.update(e_);
  v1::WatchEvent ev;
  ev.set_state(e_.state());
  hooks_.publish(ev);
}

}  // namespace

void RunFederated(v1::Experiment e, const PeerConnector& connect, const FederationOptions& opts,
                  const FederationHooks& hooks) {
  FederatedRun(std::move(e), opts, hooks).Run(connect);
}

void CancelParts(const v1::Experiment& e, const PeerConnector& connect) {
  for (const auto& p : e.parts()) {
    if (p.experiment_id().empty() || IsTerminal(p.state())) continue;
    auto peer = connect(p.daemon());
    const Status st = peer.ok() ? (*peer)->Cancel(p.experiment_id()).status() : peer.status();
    if (!st.ok()) {
      spdlog::warn("{}: cancelling its part {} on {}: {}", e.id(), p.experiment_id(), p.daemon(),
                   st.message());
    }
  }
}

}  // namespace shoal
