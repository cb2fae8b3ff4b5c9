// The federation of an experiment across nodes, against fake peer daemons: what each node is
// given, how one bad part ends the others, how a silent daemon is given up, what is relayed.
#include "server/federation.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "server/experiment_queue.h"
#include "shared/os/process.h"
#include "shared/spec/spec.h"
#include "shared/spec/sweep.h"

namespace shoal {
namespace {

// One node's daemon, as the test scripts it. Its part's id is "p<node>".
struct FakeNode {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<v1::ExperimentSpec> submitted;
  v1::Experiment part;
  Status refuse = Status::Ok();  // what Submit answers
  bool reachable = true;
  bool ignores_cancel = false;  // a part that takes long to end
  int cancels = 0;
  std::vector<v1::WatchEvent> samples;  // sent by the next Watch

  void Set(v1::ExperimentState st, const std::string& error = "") {
    std::lock_guard<std::mutex> l(mu);
    part.set_state(st);
    part.set_error(error);
    if (IsTerminal(st)) part.set_finished_unix_ms(RealtimeMs());
    cv.notify_all();
  }
  void Cut() {
    std::lock_guard<std::mutex> l(mu);
    reachable = false;
    cv.notify_all();
  }
};

class FakePeer : public PeerDaemon {
 public:
  FakePeer(FakeNode* n, uint32_t rank) : n_(n), rank_(rank) {}
  StatusOr<std::string> Submit(const v1::ExperimentSpec& spec) override {
    std::lock_guard<std::mutex> l(n_->mu);
    if (!n_->reachable) return Unavailable("connection refused");
    if (!n_->refuse.ok()) return n_->refuse;
    n_->submitted.push_back(spec);
    n_->part.set_id("p" + std::to_string(rank_));
    n_->part.set_state(v1::RUNNING);
    return n_->part.id();
  }
  StatusOr<v1::Experiment> Get(const std::string&) override {
    std::lock_guard<std::mutex> l(n_->mu);
    if (!n_->reachable) return Unavailable("connection refused");
    return n_->part;
  }
  StatusOr<v1::Experiment> Cancel(const std::string&) override {
    std::lock_guard<std::mutex> l(n_->mu);
    ++n_->cancels;
    if (!n_->reachable) return Unavailable("connection refused");
    if (!IsTerminal(n_->part.state()) && !n_->ignores_cancel) {
      n_->part.set_state(v1::CANCELLED);
      n_->part.set_finished_unix_ms(RealtimeMs());
    }
    n_->cv.notify_all();
    return n_->part;
  }
  // The state, the scripted samples, then waits for the end, a cut or an interrupt.
  Status Watch(const std::string& id,
               const std::function<void(const v1::WatchEvent&)>& on_event) override {
    std::unique_lock<std::mutex> l(n_->mu);
    if (!n_->reachable || interrupted_) return Unavailable("connection refused");
    std::vector<v1::WatchEvent> out(1);
    out[0].set_experiment_id(id);
    out[0].set_state(n_->part.state());
    out.insert(out.end(), n_->samples.begin(), n_->samples.end());
    n_->samples.clear();
    l.unlock();  // the watcher calls back in (Get)
    for (const auto& ev : out) on_event(ev);
    l.lock();
    n_->cv.wait(l, [&] { return IsTerminal(n_->part.state()) || !n_->reachable || interrupted_; });
    if (!n_->reachable || interrupted_) return Unavailable("stream broken");
    v1::WatchEvent last;
    last.set_state(n_->part.state());
    l.unlock();
    on_event(last);
    return Status::Ok();
  }
  void Interrupt() override {
    std::lock_guard<std::mutex> l(n_->mu);
    interrupted_ = true;
    n_->cv.notify_all();
  }

 private:
  FakeNode* n_;
  uint32_t rank_;
  bool interrupted_ = false;
};

class FederationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opts_.lost_after_ms = 300;
    opts_.poll_ms = 20;
    opts_.settle_ms = 2000;
    hooks_.update = [this](const v1::Experiment& e) {
      std::lock_guard<std::mutex> l(mu_);
      last_ = e;
    };
    hooks_.live = [](const v1::Experiment&) {};
    hooks_.publish = [this](const v1::WatchEvent& ev) {
      std::lock_guard<std::mutex> l(mu_);
      published_.push_back(ev);
    };
    hooks_.event = [this](const std::string& text) {
      std::lock_guard<std::mutex> l(mu_);
      events_.push_back(text);
    };
    hooks_.sample = [this](const v1::Sample& smp) {
      std::lock_guard<std::mutex> l(mu_);
      kept_.push_back(smp);
    };
    hooks_.thin_samples = [this](uint32_t node) {
      std::lock_guard<std::mutex> l(mu_);
      thinned_.push_back(node);
      std::vector<v1::Sample> left;  // as the store does: every other one of that node's goes
      size_t n = 0;
      for (auto& smp : kept_)
        if (smp.node() != node || n++ % 2 == 0) left.push_back(smp);
      kept_ = left;
    };
    hooks_.stop = [this] { return stop_.load(); };
  }

  // Starts the run of a two-node experiment on a thread; Join() waits for its end.
  void Start() {
    v1::ExperimentSpec spec;
    spec.set_kind("data_parallel");
    spec.mutable_data_parallel()->set_node_daemons("a:7443,b:7443");
    SpecLimits limits;
    limits.cores = 2;
    ApplyDefaults(&spec, limits);
    ASSERT_TRUE(ValidateSpec(spec, limits).ok()) << ValidateSpec(spec, limits).message();
    const v1::Experiment e = NewFederatedRecord("x1", spec, {"a:7443", "b:7443"}, RealtimeMs());
    PeerConnector connect =
        [this](const std::string& daemon) -> StatusOr<std::unique_ptr<PeerDaemon>> {
      const uint32_t rank = daemon == "a:7443" ? 0 : 1;
      return std::unique_ptr<PeerDaemon>(std::make_unique<FakePeer>(&nodes_[rank], rank));
    };
    run_ = std::thread([this, e, connect] { RunFederated(e, connect, opts_, hooks_); });
  }
  // Waits until both parts were submitted.
  bool Submitted() {
    for (int i = 0; i < 400; ++i) {
      bool both = true;
      for (auto& n : nodes_) {
        std::lock_guard<std::mutex> l(n.mu);
        both = both && !n.submitted.empty();
      }
      if (both) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  // Runs it with both parts succeeding; false when they were not both submitted.
  bool RunBothSucceeding() {
    Start();
    const bool submitted = Submitted();
    nodes_[0].Set(v1::SUCCEEDED);
    nodes_[1].Set(v1::SUCCEEDED);
    Join();
    return submitted;
  }
  v1::Experiment Join() {
    run_.join();
    std::lock_guard<std::mutex> l(mu_);
    return last_;
  }

  FederationOptions opts_;
  FederationHooks hooks_;
  FakeNode nodes_[2];
  std::atomic<int> stop_{ExperimentQueue::kNone};
  std::thread run_;
  std::mutex mu_;
  v1::Experiment last_;
  std::vector<v1::WatchEvent> published_;
  std::vector<std::string> events_;
  std::vector<v1::Sample> kept_;
  std::vector<uint32_t> thinned_;
};

TEST_F(FederationTest, EachNodeGetsItsRankAndTheWholeSucceedsWithNodeZerosResult) {
  Start();
  ASSERT_TRUE(Submitted());
  for (uint32_t i = 0; i < 2; ++i) {
    std::lock_guard<std::mutex> l(nodes_[i].mu);
    const v1::ExperimentSpec& part = nodes_[i].submitted.at(0);
    EXPECT_EQ(part.data_parallel().node_rank(), i);
    EXPECT_EQ(part.data_parallel().nodes(), 2u);
    EXPECT_EQ(part.data_parallel().master(), "a:29500");
    EXPECT_FALSE(part.data_parallel().has_node_daemons());  // a part never federates in turn
    nodes_[i].part.mutable_result()->set_samples(100 + i);
    nodes_[i].part.mutable_result()->set_sum_of_peak_pss_bytes(1000 + i);
    v1::ProcessInfo* w = nodes_[i].part.add_processes();
    w->set_role("worker");
    w->set_pid(int(1000 + i));
  }
  nodes_[1].Set(v1::SUCCEEDED);
  nodes_[0].Set(v1::SUCCEEDED);
  const v1::Experiment e = Join();
  EXPECT_EQ(e.state(), v1::SUCCEEDED) << e.error();
  EXPECT_EQ(e.result().samples(), 100u);  // node 0's: its rank 0 saw the world
  ASSERT_EQ(e.parts_size(), 2);
  EXPECT_EQ(e.parts(1).experiment_id(), "p1");
  EXPECT_EQ(e.parts(1).state(), v1::SUCCEEDED);
  EXPECT_EQ(e.parts(1).sum_of_peak_pss_bytes(), 1001u);  // each part's own, for its table rows
  EXPECT_FALSE(e.parts(1).has_peak_pss_sum_bytes());     // unknown stays unknown
  ASSERT_EQ(e.processes_size(), 2);
  EXPECT_EQ(e.processes(1).pid(), 1001);
  EXPECT_EQ(e.processes(1).node(), 1u);
  EXPECT_EQ(nodes_[0].cancels + nodes_[1].cancels, 0);
}

TEST_F(FederationTest, ABadPartEndsTheOthersAndTheErrorNamesItFirst) {
  Start();
  ASSERT_TRUE(Submitted());
  nodes_[1].Set(v1::FAILED, "worker 0 killed by signal 9");
  const v1::Experiment e = Join();
  EXPECT_EQ(e.state(), v1::FAILED);
  EXPECT_EQ(nodes_[0].cancels, 1);
  EXPECT_EQ(nodes_[0].part.state(), v1::CANCELLED);
  EXPECT_EQ(e.error().rfind("node 1 (b:7443): FAILED: worker 0 killed by signal 9; then node 0 "
                            "(a:7443): CANCELLED",
                            0),
            0u)
      << e.error();
}

TEST_F(FederationTest, ADaemonSilentPastTheTimeoutIsLostAndTheOthersEnd) {
  Start();
  ASSERT_TRUE(Submitted());
  const auto t0 = std::chrono::steady_clock::now();
  nodes_[1].Cut();
  const v1::Experiment e = Join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e.state(), v1::FAILED);
  EXPECT_EQ(e.error().rfind("node 1 (b:7443): lost: its shoald has not answered for 0.3 s "
                            "(connection refused)",
                            0),
            0u)
      << e.error();
  EXPECT_EQ(e.parts(1).state(), v1::FAILED);
  EXPECT_EQ(nodes_[0].part.state(), v1::CANCELLED);
  EXPECT_GE(took, 0.3);  // not before the timeout...
  EXPECT_LT(took, 3.0);  // ...and not long after it
}

TEST_F(FederationTest, ARefusedPartCancelsThoseAlreadyAccepted) {
  nodes_[1].refuse = InvalidArgument("workers: 9 is above this daemon's max_workers (8)");
  Start();
  const v1::Experiment e = Join();
  EXPECT_EQ(e.state(), v1::FAILED);
  EXPECT_EQ(e.error(),
            "node 1 (b:7443) did not take its part: workers: 9 is above this daemon's "
            "max_workers (8)");
  EXPECT_EQ(nodes_[0].cancels, 1);
  EXPECT_EQ(e.parts(0).experiment_id(), "p0");
}

TEST_F(FederationTest, CancellingTheRecordCancelsEveryPart) {
  Start();
  ASSERT_TRUE(Submitted());
  stop_ = ExperimentQueue::kCancel;
  const v1::Experiment e = Join();
  EXPECT_EQ(e.state(), v1::CANCELLED);
  EXPECT_EQ(nodes_[0].cancels, 1);
  EXPECT_EQ(nodes_[1].cancels, 1);
}

// A cancelled run waits for its parts' ends, but not past shoald's shutdown.
TEST_F(FederationTest, AShutdownEndsTheWaitForACancelledRunsParts) {
  opts_.settle_ms = 60'000;
  nodes_[1].ignores_cancel = true;
  Start();
  ASSERT_TRUE(Submitted());
  stop_ = ExperimentQueue::kCancel;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  stop_ = ExperimentQueue::kShutdown;
  const v1::Experiment e = Join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(e.state(), v1::CANCELLED);
  EXPECT_EQ(e.parts(1).error(), "lost: still ending when shoald stopped");
}

// A stop asked for while the parts are submitted is honoured before the next one.
TEST_F(FederationTest, AStopBeforeThePartsAreSubmittedSubmitsNone) {
  for (const int stop : {ExperimentQueue::kCancel, ExperimentQueue::kShutdown}) {
    stop_ = stop;
    Start();
    const v1::Experiment e = Join();
    EXPECT_EQ(e.state(), stop == ExperimentQueue::kCancel ? v1::CANCELLED : v1::INTERRUPTED);
    for (auto& n : nodes_) EXPECT_TRUE(n.submitted.empty());
  }
}

TEST_F(FederationTest, SamplesAreRelayedLabelledByTheirNode) {
  v1::WatchEvent s;
  s.mutable_sample()->set_steps(7);
  nodes_[1].samples.push_back(s);
  ASSERT_TRUE(RunBothSucceeding());
  std::lock_guard<std::mutex> l(mu_);
  const auto it = std::find_if(published_.begin(), published_.end(),
                               [](const v1::WatchEvent& ev) { return ev.has_sample(); });
  ASSERT_NE(it, published_.end());
  EXPECT_EQ(it->sample().steps(), 7u);
  ASSERT_TRUE(it->has_node());
  EXPECT_EQ(it->node(), 1u);
  EXPECT_EQ(published_.back().state(), v1::SUCCEEDED);  // the whole's end, last
  EXPECT_NE(std::find(events_.begin(), events_.end(), "node 1 (b:7443): SUCCEEDED"), events_.end());
}

TEST_F(FederationTest, EachPartsSamplesAreKeptWithItsNodeAndThinnedOnTheirOwn) {
  opts_.max_kept_samples = 4;
  for (uint32_t node = 0; node < 2; ++node) {
    for (int t = 0; t < (node == 0 ? 3 : 7); ++t) {  // node 1 ticks past the cap, node 0 not
      v1::WatchEvent s;
      s.mutable_sample()->set_t_ms(100.0 * t);
      nodes_[node].samples.push_back(s);
    }
  }
  ASSERT_TRUE(RunBothSucceeding());
  std::lock_guard<std::mutex> l(mu_);
  std::map<uint32_t, std::vector<double>> t_ms;
  for (const auto& smp : kept_) {
    ASSERT_TRUE(smp.has_node());
    t_ms[smp.node()].push_back(smp.t_ms());
  }
  EXPECT_EQ(t_ms[0], (std::vector<double>{0, 100, 200}));  // under the cap: every tick
  // Node 1: 4 kept, at the 5th halved to 0 and 200, then every other tick: 400, 600.
  EXPECT_EQ(t_ms[1], (std::vector<double>{0, 200, 400, 600}));
  EXPECT_EQ(thinned_, (std::vector<uint32_t>{1}));
}

}  // namespace
}  // namespace shoal
