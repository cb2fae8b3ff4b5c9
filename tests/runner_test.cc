// The runner's state machine on fake OS seams: every transition of an experiment's life, with no
// process started.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>

#include "server/experiment_runner.h"
#include "spdlog/spdlog.h"
#include "tests/fakes.h"

namespace shoal {
namespace {

using ipc::v1::LeaderEvent;
using testing::FakeChildWaiter;
using testing::FakeClock;
using testing::FakeProc;
using testing::FakeProcessControl;
using testing::FakeSegmentJanitor;

constexpr uint64_t kMs = 1'000'000;
int Exited(int code) { return code << 8; }  // waitpid statuses
int Killed(int sig) { return sig; }

class RunnerTest : public ::testing::Test {
 protected:
  RunnerTest() : reaper_(&waiter_) {
    spdlog::set_level(spdlog::level::warn);
    procfs_.procs[leader()] = {};  // the leader's /proc, for the sampler
  }

  // The fake OS, for every runner of the test.
  RunnerEnv Env() {
    RunnerEnv env;
    env.os.proc = &proc_;
    env.os.clock = &clock_;
    env.os.segments = &segments_;
    env.reaper = &reaper_;
    env.os.procfs = &procfs_;
    env.sampler_cpu = [] { return uint64_t(0); };
    env.grace_ns = 3000 * kMs;
    env.drain_ns = 10000 * kMs;
    env.worker_bin = "/bin/shoal-worker";
    return env;
  }
  // Hooks that record what the runner reports.
  RunnerHooks Hooks() {
    RunnerHooks hooks;
    hooks.update = [this](const v1::Experiment& x) { updates_.push_back(x); };
    hooks.live = [](const v1::Experiment&) {};
    hooks.publish = [this](const v1::WatchEvent& ev) { published_.push_back(ev); };
    hooks.event = [this](double, const std::string& text) { events_.push_back(text); };
    return hooks;
  }
  static v1::Experiment Queued(v1::ExperimentSpec spec) {
    if (!spec.has_workers()) spec.set_workers(2);
    if (!spec.has_batches() && !spec.has_epochs()) spec.set_batches(10);
    spec.set_batch_size(64);
    spec.set_sample_interval_ms(200);
    spec.set_start("fork");
    v1::Experiment e;
    e.set_id("xrunner");
    *e.mutable_spec() = spec;
    e.set_state(v1::QUEUED);
    return e;
  }
  std::unique_ptr<ExperimentRunner> Make(v1::ExperimentSpec spec = {}) {
    return std::make_unique<ExperimentRunner>(Queued(spec), Env(), Hooks());
  }

  void Feed(ExperimentRunner& r, const LeaderEvent& ev) {
    const std::string f = EncodeFrame(ev);
    r.OnBytes(f.data(), f.size());
  }
  void Started(ExperimentRunner& r, uint32_t index, pid_t pid) {
    LeaderEvent ev;
    ev.mutable_worker_started()->set_index(index);
    ev.mutable_worker_started()->set_pid(pid);
    Feed(r, ev);
  }
  // Launched, two workers started, an ok result and a clean leader exit, run to its end.
  bool RunsCleanly(ExperimentRunner& r) {
    if (!r.Launch()) return false;
    Started(r, 0, 1001);
    Started(r, 1, 1002);
    Result(r, true);
    LeaderEnds(r, Exited(0));
    return RunOut(r);
  }
  void Result(ExperimentRunner& r, bool ok, const std::string& error = "") {
    LeaderEvent ev;
    auto* res = ev.mutable_result();
    res->set_ok(ok);
    res->set_error(error);
    for (uint32_t i = 0; i < 2; ++i) {
      auto* w = res->add_workers();
      w->set_index(i);
      w->set_phase(ok ? ipc::v1::FINISHED : ipc::v1::TRAINING);
      w->set_steps(10);
      w->set_samples(640);
      w->set_first_step_ns(clock_.real - 4000 * kMs);
      w->set_last_step_ns(clock_.real - 1000 * kMs);
    }
    Feed(r, ev);
  }
  // The leader ends: the kernel reports its exit and its pipe closes.
  void LeaderEnds(ExperimentRunner& r, int status, bool group_empties = true) {
    waiter_.ended.push_back({leader(), status});
    reaper_.Poll();
    r.OnEof();
    if (group_empties) proc_.live_groups.erase(leader());
  }
  // Advances the machine until it is done or `limit` rounds of 10 ms pass.
  bool RunOut(ExperimentRunner& r, int limit = 2000) {
    for (int i = 0; i < limit; ++i) {
      if (r.Advance()) return true;
      clock_.Advance(10 * kMs);
    }
    return false;
  }
  pid_t leader() const { return 1000; }

  FakeClock clock_;
  FakeProcessControl proc_;
  FakeChildWaiter waiter_;
  FakeSegmentJanitor segments_;
  FakeProc procfs_;
  ChildReaper reaper_;
  std::vector<v1::Experiment> updates_;
  std::vector<v1::WatchEvent> published_;
  std::vector<std::string> events_;
};

TEST_F(RunnerTest, LaunchSpawnsTheLeaderInItsOwnGroupAndMarksItRunning) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  ASSERT_EQ(proc_.spawned.size(), 1u);
  EXPECT_EQ(proc_.spawned[0][1], "--role");
  EXPECT_EQ(proc_.spawned[0][2], "leader");
  EXPECT_TRUE(proc_.GroupExists(leader()));
  EXPECT_EQ(r->phase(), ExperimentRunner::Phase::kRunning);
  ASSERT_FALSE(updates_.empty());
  EXPECT_EQ(updates_.front().state(), v1::RUNNING);
  EXPECT_GE(r->leader_fd(), 0);
}

TEST_F(RunnerTest, OkResultAndCleanExitSucceed) {
  auto r = Make();
  ASSERT_TRUE(RunsCleanly(*r));
  const auto& e = r->experiment();
  EXPECT_EQ(e.state(), v1::SUCCEEDED) << e.error();
  EXPECT_EQ(e.result().samples(), 1280u);
  EXPECT_NEAR(e.result().samples_per_sec(), 1280 / 3.0, 1e-6);  // over 3 s of training
  EXPECT_EQ(proc_.CountGroupSignals(SIGTERM), 0);
  EXPECT_EQ(segments_.removed, std::vector<std::string>{"shoal.xrunner."});
  EXPECT_EQ(published_.back().state(), v1::SUCCEEDED);
  EXPECT_EQ(updates_.back().state(), v1::SUCCEEDED);
}

// Storing the running record may wait (SQLite's lock held by another process): the wait is
// queueing, not the run's time.
TEST_F(RunnerTest, TheRunsClocksStartAfterItsRecordIsStored) {
  RunnerHooks hooks = Hooks();
  hooks.update = [this](const v1::Experiment& x) {
    if (x.state() == v1::RUNNING && updates_.empty()) clock_.Advance(5000 * kMs);
    updates_.push_back(x);
  };
  v1::Experiment queued = Queued({});
  queued.set_submitted_unix_ms(int64_t(clock_.real / 1'000'000));
  ExperimentRunner r(queued, Env(), hooks);
  ASSERT_TRUE(RunsCleanly(r));
  const auto& e = r.experiment();
  EXPECT_EQ(e.state(), v1::SUCCEEDED) << e.error();
  EXPECT_EQ(e.result().queued_ms(), 5000);
  EXPECT_LT(e.result().wall_ms(), 1000);  // the run took no fake time; the store took 5 s
  EXPECT_EQ(e.started_unix_ms(), queued.submitted_unix_ms() + 5000);
}

TEST_F(RunnerTest, CancelSendsTermThenKillAfterTheGracePeriod) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  r->RequestStop(false);
  EXPECT_EQ(proc_.CountGroupSignals(SIGTERM), 1);
  EXPECT_EQ(r->phase(), ExperimentRunner::Phase::kStopping);
  r->RequestStop(false);  // idempotent
  EXPECT_EQ(proc_.CountGroupSignals(SIGTERM), 1);
  clock_.Advance(2999 * kMs);
  r->Advance();
  EXPECT_EQ(proc_.CountGroupSignals(SIGKILL), 0);
  clock_.Advance(2 * kMs);
  r->Advance();
  EXPECT_EQ(proc_.CountGroupSignals(SIGKILL), 1);
  EXPECT_EQ(r->phase(), ExperimentRunner::Phase::kKilled);
  LeaderEnds(*r, Killed(SIGKILL));
  ASSERT_TRUE(RunOut(*r));
  EXPECT_EQ(r->experiment().state(), v1::CANCELLED);
  EXPECT_EQ(r->experiment().error(), "cancelled by request");
}

TEST_F(RunnerTest, AFinishedRunWinsOverALateCancel) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  Result(*r, true);
  waiter_.ended.push_back({leader(), Exited(0)});
  reaper_.Poll();
  r->RequestStop(false);  // arrives after the leader finished, before the runner noticed
  r->OnEof();
  proc_.live_groups.erase(leader());
  ASSERT_TRUE(RunOut(*r));
  EXPECT_EQ(r->experiment().state(), v1::SUCCEEDED);
}

TEST_F(RunnerTest, ShutdownInterrupts) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  r->RequestStop(true);
  LeaderEnds(*r, Killed(SIGTERM));
  ASSERT_TRUE(RunOut(*r));
  EXPECT_EQ(r->experiment().state(), v1::INTERRUPTED);
}

TEST_F(RunnerTest, AWorkerKilledFailsTheRunWithItsStory) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  Started(*r, 0, 1001);
  Started(*r, 1, 1002);
  LeaderEvent ev;
  ev.mutable_worker_exited()->set_index(1);
  ev.mutable_worker_exited()->set_pid(1002);
  ev.mutable_worker_exited()->set_wait_status(Killed(SIGKILL));
  Feed(*r, ev);
  Result(*r, false, "worker 1 killed by signal 9");
  LeaderEnds(*r, Exited(1));
  ASSERT_TRUE(RunOut(*r));
  const auto& e = r->experiment();
  EXPECT_EQ(e.state(), v1::FAILED);
  EXPECT_EQ(e.error(), "worker 1 killed by signal 9");
  bool seen = false;
  for (const auto& p : e.processes()) {
    if (p.pid() != 1002) continue;
    seen = true;
    EXPECT_FALSE(p.has_cuda_device());  // on the CPU
    EXPECT_TRUE(p.exit_known());
    EXPECT_EQ(p.signal(), SIGKILL);
    EXPECT_FALSE(p.alive());
  }
  EXPECT_TRUE(seen);
}

// On CUDA each process says its device: a worker its spec's, the leader the shared weights'
// (on the CPU none: AWorkerKilledFailsTheRunWithItsStory).
TEST_F(RunnerTest, CudaProcessesNameTheirDevice) {
  v1::ExperimentSpec spec;
  spec.set_device("cuda");
  spec.set_share(true);
  spec.set_cuda_devices("1");
  auto r = Make(spec);
  ASSERT_TRUE(RunsCleanly(*r));
  ASSERT_EQ(r->experiment().processes_size(), 3);  // the leader and two workers
  for (const auto& p : r->experiment().processes()) {
    ASSERT_TRUE(p.has_cuda_device()) << p.pid();
    EXPECT_EQ(p.cuda_device(), 1u) << p.pid();
  }
}

TEST_F(RunnerTest, AnOrphanedWorkersRealExitIsKept) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  Started(*r, 0, 1001);
  r->RequestStop(false);
  // The leader dies first; its worker is reparented to shoald and reaped there.
  waiter_.ended.push_back({1001, Killed(SIGKILL)});
  LeaderEnds(*r, Killed(SIGKILL));
  ASSERT_TRUE(RunOut(*r));
  for (const auto& p : r->experiment().processes()) {
    EXPECT_TRUE(p.exit_known()) << p.pid();
    EXPECT_EQ(p.signal(), SIGKILL) << p.pid();
  }
}

TEST_F(RunnerTest, AGroupThatNeverEmptiesIsReportedNotWaitedOnForever) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  Result(*r, true);
  LeaderEnds(*r, Exited(0), /*group_empties=*/false);
  ASSERT_TRUE(RunOut(*r));
  EXPECT_EQ(r->experiment().state(), v1::FAILED);
  EXPECT_NE(r->experiment().error().find("could not be stopped (D state?)"), std::string::npos);
  EXPECT_GE(proc_.CountGroupSignals(SIGKILL), 2);
}

// A leader that outlives SIGKILL (uninterruptible sleep) is given up on after the drain time,
// and the error says how long that was.
TEST_F(RunnerTest, ALeaderThatOutlivesSigkillIsGivenUpOnAfterTheDrainTime) {
  RunnerEnv env = Env();
  env.drain_ns = 2500 * kMs;
  ExperimentRunner r(Queued({}), env, Hooks());
  ASSERT_TRUE(r.Launch());
  r.RequestStop(false);
  ASSERT_TRUE(RunOut(r));  // grace (3 s), SIGKILL, then 2.5 s of waiting on a leader that stays
  EXPECT_EQ(r.experiment().state(), v1::CANCELLED);
  EXPECT_NE(r.experiment().error().find("cancelled by request; processes did not exit 2500 ms "
                                        "after SIGKILL"),
            std::string::npos)
      << r.experiment().error();
  EXPECT_GE(proc_.CountGroupSignals(SIGKILL), 1);
}

TEST_F(RunnerTest, ALeaderThatCannotStartFailsAtOnce) {
  proc_.fail_spawn = true;
  auto r = Make();
  EXPECT_FALSE(r->Launch());
  EXPECT_EQ(r->phase(), ExperimentRunner::Phase::kDone);
  EXPECT_EQ(r->experiment().state(), v1::FAILED);
  EXPECT_NE(r->experiment().error().find("posix_spawn"), std::string::npos);
}

TEST_F(RunnerTest, ACorruptStatusStreamStopsTheRun) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  const char garbage[] = "\xff\xff\xff\x7f garbage";
  r->OnBytes(garbage, sizeof garbage);
  EXPECT_EQ(proc_.CountGroupSignals(SIGTERM), 1);
  LeaderEnds(*r, Killed(SIGTERM));
  ASSERT_TRUE(RunOut(*r));
  EXPECT_EQ(r->experiment().state(), v1::FAILED);
  EXPECT_NE(r->experiment().error().find("status stream is corrupt"), std::string::npos);
}

TEST_F(RunnerTest, ALeaderErrorIsTheReason) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  LeaderEvent ev;
  ev.mutable_error()->set_message("dataset: it has no training images");
  Feed(*r, ev);
  LeaderEnds(*r, Exited(1));
  ASSERT_TRUE(RunOut(*r));
  EXPECT_EQ(r->experiment().state(), v1::FAILED);
  EXPECT_EQ(r->experiment().error(), "dataset: it has no training images");
}

TEST_F(RunnerTest, TicksPublishProgressEverySampleInterval) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  LeaderEvent ev;
  auto* w = ev.mutable_progress()->add_workers();
  w->set_steps(3);
  w->set_last_loss(1.5f);
  Feed(*r, ev);
  for (int i = 0; i < 10; ++i) {
    r->Advance();
    clock_.Advance(100 * kMs);
  }
  int samples = 0;
  for (const auto& p : published_) {
    if (!p.has_sample()) continue;
    ++samples;
    EXPECT_EQ(p.sample().steps(), 3u);
    EXPECT_EQ(p.sample().steps_total(), 20u);
    EXPECT_DOUBLE_EQ(p.sample().loss(), 1.5);
  }
  EXPECT_EQ(samples, 5);  // 1 s at 200 ms
}

// A worker's first step is two events, each once: when it began (after the worker's request)
// and once a report sees it ended, with its length when that report is the first to see a step.
TEST_F(RunnerTest, AWorkersFirstStepIsAnEventWhenItBeginsAndWhenItEnds) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  constexpr uint64_t kT0 = 1000000 * kMs;  // CLOCK_REALTIME, as the workers read it
  auto progress = [&](uint64_t steps0, uint64_t last0, uint64_t steps1) {
    LeaderEvent ev;
    auto* w0 = ev.mutable_progress()->add_workers();
    w0->set_index(0);
    w0->set_requested_ns(kT0);
    w0->set_first_step_ns(kT0 + 40 * kMs);
    w0->set_steps(steps0);
    w0->set_last_step_ns(last0);
    auto* w1 = ev.mutable_progress()->add_workers();
    w1->set_index(1);
    w1->set_requested_ns(kT0);
    w1->set_first_step_ns(kT0 + 60 * kMs);
    w1->set_steps(steps1);
    w1->set_last_step_ns(steps1 > 0 ? kT0 + 900 * kMs : 0);
    Feed(*r, ev);
  };
  progress(0, 0, 0);
  progress(1, kT0 + 1290 * kMs, 0);  // worker 0's first report of a step: that step alone
  progress(4, kT0 + 1700 * kMs, 3);  // worker 1's first report sees three
  progress(9, kT0 + 2100 * kMs, 7);
  const std::vector<std::string> want = {
      "worker 0 training 40 ms after its request", "worker 1 training 60 ms after its request",
      "worker 0 finished its first step in 1250 ms", "worker 1 finished its first 3 steps"};
  std::vector<std::string> got;
  for (const auto& text : events_)
    if (text.rfind("worker ", 0) == 0) got.push_back(text);
  EXPECT_EQ(got, want);
}

// The running record is stored as processes start and every 5 s after, with its environment
// and its processes: a shoald killed mid-run leaves that for its successor to mark interrupted.
TEST_F(RunnerTest, TheRunningRecordIsStoredAsProcessesStartAndEveryFewSeconds) {
  RunnerHooks hooks = Hooks();
  std::vector<v1::Experiment> saved;
  hooks.checkpoint = [&](const v1::Experiment& x) { saved.push_back(x); };
  ExperimentRunner r(Queued({}), Env(), hooks);
  ASSERT_TRUE(r.Launch());
  r.Advance();  // the first tick: the leader is in the record
  ASSERT_EQ(saved.size(), 1u);
  EXPECT_EQ(saved[0].state(), v1::RUNNING);
  ASSERT_EQ(saved[0].processes_size(), 1);
  EXPECT_EQ(saved[0].processes(0).role(), "leader");
  EXPECT_FALSE(saved[0].environment().empty());
  Started(r, 0, 1001);
  Started(r, 1, 1002);
  for (int i = 0; i < 10; ++i) {  // 1 s: one more, for the workers, then none
    clock_.Advance(100 * kMs);
    r.Advance();
  }
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[1].processes_size(), 3);
  for (int i = 0; i < 45; ++i) {  // 4.5 s more: 5 s since the last
    clock_.Advance(100 * kMs);
    r.Advance();
  }
  EXPECT_EQ(saved.size(), 3u);
}

// `get` of a running experiment shows each process's peak PSS sampled so far, and the sums', as
// the final record does from the same sampler.
TEST_F(RunnerTest, TheLiveRecordCarriesThePeaksSampledSoFar) {
  RunnerHooks hooks = Hooks();
  std::optional<v1::Experiment> live;
  hooks.live = [&](const v1::Experiment& x) { live = x; };
  ExperimentRunner r(Queued({}), Env(), hooks);
  ASSERT_TRUE(r.Launch());
  procfs_.procs[leader()].pss_kb = 70000;
  r.Advance();
  procfs_.procs[leader()].pss_kb = 20000;  // fell: the peak stays
  clock_.Advance(1000 * kMs);
  r.Advance();
  ASSERT_TRUE(live.has_value());
  ASSERT_EQ(live->processes_size(), 1);
  ASSERT_TRUE(live->processes(0).has_peak_pss_bytes());
  EXPECT_EQ(live->processes(0).peak_pss_bytes(), 70000ull << 10);
  EXPECT_FALSE(live->processes(0).has_peak_gpu_memory_bytes());  // no GPU seen: absent
  // And the result's memory peaks so far, as "What a result holds" says.
  EXPECT_EQ(live->result().peak_pss_sum_bytes(), 70000ull << 10);
  EXPECT_EQ(live->result().sum_of_peak_pss_bytes(), 70000ull << 10);
  EXPECT_TRUE(live->result().has_peak_rss_sum_bytes());
  EXPECT_FALSE(live->result().has_wall_ms());  // still running
}

// Live samples/s counts the samples the workers report, not steps x batch_size: here two
// pipeline stages step on the same samples and only the last counts them.
TEST_F(RunnerTest, LiveSamplesPerSecondCountsTheWorkersSamples) {
  auto r = Make();
  ASSERT_TRUE(r->Launch());
  auto progress = [&](uint64_t steps, uint64_t samples) {
    LeaderEvent ev;
    for (int stage = 0; stage < 2; ++stage) {
      auto* w = ev.mutable_progress()->add_workers();
      w->set_steps(steps);
      w->set_samples(stage == 1 ? samples : 0);
    }
    Feed(*r, ev);
  };
  progress(0, 0);
  r->Advance();
  clock_.Advance(200 * kMs);
  progress(10, 40);  // the first steps: a rate needs two step ends
  r->Advance();
  clock_.Advance(200 * kMs);
  progress(20, 80);  // 20 steps of the two stages, 40 samples through the pipeline, in 200 ms
  r->Advance();
  std::vector<const v1::Sample*> samples;
  for (const auto& p : published_)
    if (p.has_sample()) samples.push_back(&p.sample());
  ASSERT_GE(samples.size(), 2u);
  const v1::Sample *first = samples.front(), *last = samples.back();
  // The first ticks have no two step ends to count between: their rates are unknown, not 0.
  EXPECT_FALSE(first->has_steps_per_sec());
  EXPECT_FALSE(first->has_samples_per_sec());
  EXPECT_DOUBLE_EQ(last->steps_per_sec(), 100.0);
  EXPECT_DOUBLE_EQ(last->samples_per_sec(), 200.0);
}

// A tick that finds no process to read knows no memory figure: it sends and keeps no sample
// (a sample of 0 bytes would be a figure, and wrong).
TEST_F(RunnerTest, NoSampleWhileNoProcessCanBeRead) {
  std::vector<uint64_t> kept;
  RunnerHooks hooks = Hooks();
  hooks.sample = [&](const v1::Sample& s) { kept.push_back(s.total_pss_bytes()); };
  auto r = std::make_unique<ExperimentRunner>(Queued({}), Env(), hooks);
  ASSERT_TRUE(r->Launch());
  for (int i = 0; i < 5; ++i) {
    r->Advance();
    clock_.Advance(100 * kMs);
  }
  const size_t alive = published_.size();
  ASSERT_GT(alive, 0u);
  procfs_.procs.erase(leader());  // exited; its exit not yet reaped
  for (int i = 0; i < 5; ++i) {
    r->Advance();
    clock_.Advance(100 * kMs);
  }
  EXPECT_EQ(published_.size(), alive);
  for (const auto& ev : published_) {
    if (!ev.has_sample()) continue;
    EXPECT_GT(ev.sample().total_pss_bytes(), 0u);
  }
  ASSERT_FALSE(kept.empty());
  for (uint64_t pss : kept) EXPECT_GT(pss, 0u);
}

TEST_F(RunnerTest, AForkServerThatDiesUnderAForkserverRunIsAnEvent) {
  v1::Experiment e = Queued({});
  e.mutable_spec()->set_start("forkserver");
  std::vector<std::string> exits = {"", "killed by signal 9", ""};
  size_t asked = 0;
  RunnerEnv env = Env();
  env.fork_server_pid = [] { return pid_t(-1); };
  env.fork_server_exit = [&] { return asked < exits.size() ? exits[asked++] : std::string(); };
  ExperimentRunner r(e, env, Hooks());
  ASSERT_TRUE(r.Launch());
  for (int i = 0; i < 5; ++i) {
    r.Advance();
    clock_.Advance(250 * kMs);
  }
  EXPECT_GE(asked, 3u);
  EXPECT_EQ(std::count(events_.begin(), events_.end(),
                       "the forkserver killed by signal 9; the daemon restarts it"),
            1);
}

// A forkserver run samples the forkserver and its idle children (their pages are shared with
// the workers, and their peaks are in the sum of peak PSS): the process table lists them too.
TEST_F(RunnerTest, AForkserverRunListsTheForkServerAndItsIdleChildren) {
  v1::Experiment e = Queued({});
  e.mutable_spec()->set_start("forkserver");
  RunnerEnv env = Env();
  env.fork_server_pid = [] { return pid_t(500); };
  procfs_.procs[500].pss_kb = 30000;
  procfs_.procs[501].pss_kb = 1000;
  procfs_.children[500] = "501";
  RunnerHooks hooks = Hooks();
  std::optional<v1::Experiment> live;
  hooks.live = [&](const v1::Experiment& x) { live = x; };
  ExperimentRunner r(e, env, hooks);
  ASSERT_TRUE(r.Launch());
  for (int i = 0; i < 5; ++i) {
    r.Advance();
    clock_.Advance(250 * kMs);
  }
  ASSERT_TRUE(live.has_value());
  std::map<std::string, uint64_t> peak;
  for (const auto& p : live->processes()) peak[p.role()] = p.peak_pss_bytes();
  for (const auto& p : live->fork_server_processes()) peak[p.role()] = p.peak_pss_bytes();
  EXPECT_EQ(live->processes_size(), 1);  // the experiment's own: its leader
  EXPECT_EQ(peak, (std::map<std::string, uint64_t>{{"leader", 60000ull << 10},
                                                   {"forkserver", 30000ull << 10},
                                                   {"pool", 1000ull << 10}}));
}

// Without a cgroup (none can be made, or --run-cgroups no), what escapes a worker's line is
// found in /proc and ended by pid: a child of one of the leader's other threads, and one the
// leader adopted (a subreaper: a double fork's orphan) once it is no worker the leader is
// starting (a stranger at two ticks running); signalled with the run, forgotten once gone.
TEST_F(RunnerTest, WithoutACgroupWhatTheLeaderAdoptsAndItsThreadsStartAreTheRuns) {
  procfs_.threads[leader()] = {leader() + 1};
  procfs_.children[leader()] = "700";      // adopted
  procfs_.children[leader() + 1] = "701";  // its other thread's
  for (pid_t p : {700, 701}) procfs_.procs[p].pss_kb = 5000;
  std::optional<v1::Experiment> live;
  RunnerHooks hooks = Hooks();
  hooks.live = [&](const v1::Experiment& x) { live = x; };
  ExperimentRunner r(Queued({}), Env(), hooks);
  ASSERT_TRUE(r.Launch());
  EXPECT_EQ(r.experiment().containment(), "process group and /proc (no cgroup)");
  auto children = [&] {
    std::map<pid_t, int> out;  // pid -> the worker's index
    for (const auto& p : live->processes())
      if (p.role() == "child" && p.alive()) out[p.pid()] = p.index();
    return out;
  };
  r.Advance();  // the first tick: strangers, maybe workers being started
  ASSERT_TRUE(live.has_value());
  EXPECT_TRUE(children().empty());
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(200 * kMs);
    r.Advance();
  }
  EXPECT_EQ(children(), (std::map<pid_t, int>{{700, -1}, {701, -1}}));
  r.RequestStop(false);
  for (pid_t p : {700, 701})
    EXPECT_EQ(std::count(proc_.signals.begin(), proc_.signals.end(), std::pair{p, SIGTERM}), 1)
        << p;
  procfs_.procs.erase(700);  // it ended
  procfs_.children[leader()] = "";
  clock_.Advance(200 * kMs);
  r.Advance();
  EXPECT_EQ(children(), (std::map<pid_t, int>{{701, -1}}));
}

TEST_F(RunnerTest, StepsTotalIsAbsentWhenTheDaemonCannotKnowIt) {
  v1::ExperimentSpec spec;
  spec.set_epochs(2);
  auto r = Make(spec);
  ASSERT_TRUE(r->Launch());
  r->Advance();
  ASSERT_FALSE(published_.empty());
  bool sampled = false;
  for (const auto& p : published_) {
    if (!p.has_sample()) continue;
    sampled = true;
    EXPECT_FALSE(p.sample().has_steps_total());
  }
  EXPECT_TRUE(sampled);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// A long run keeps at most kMaxKeptSamples samples, evenly spaced over its whole length.
TEST_F(RunnerTest, KeptSamplesAreCappedAndEvenlySpaced) {
  std::vector<double> kept;
  int thinned = 0;
  RunnerHooks hooks = Hooks();  // plus samples kept the way the store keeps them
  hooks.sample = [&](const v1::Sample& s) { kept.push_back(s.t_ms()); };
  hooks.thin_samples = [&] {
    ++thinned;
    std::vector<double> half;
    for (size_t i = 0; i < kept.size(); i += 2) half.push_back(kept[i]);
    kept = half;
  };
  ExperimentRunner runner(Queued({}), Env(), hooks);
  ASSERT_TRUE(runner.Launch());
  for (int i = 0; i < 1100; ++i) {
    runner.Advance();
    clock_.Advance(200 * kMs);
  }
  EXPECT_EQ(thinned, 2);
  EXPECT_LE(kept.size(), size_t(kMaxKeptSamples));
  ASSERT_GT(kept.size(), 200u);
  for (size_t i = 1; i < kept.size(); ++i) EXPECT_NEAR(kept[i] - kept[i - 1], 800, 1e-6) << i;
  EXPECT_NEAR(kept.front(), 0, 1e-6);  // the start of the run is still there
}

}  // namespace
}  // namespace shoal
