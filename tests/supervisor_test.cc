// The leader's watch over its workers on a fake launcher, a fake clock and a real scoreboard:
// exits, stalls, stop-all, a lost forkserver. No process is started, no signal reaches a process,
// and no test sleeps: each drives the supervisor look by look, 5 ms of fake time apart.
#include "worker/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <set>
#include <thread>

#include "shared/ipc/ipc_codec.h"
#include "shared/ipc/packet.h"
#include "shared/os/process.h"
#include "shared/os/shm.h"
#include "tests/fakes.h"
#include "tests/testutil.h"
#include "worker/fork_server_exits.h"
#include "worker/kinds/command/report_reader.h"
#include "worker/launchers.h"

namespace shoal {
namespace {

// Pids no process can have (above the kernel's pid_max), so nothing real is ever touched.
constexpr pid_t kPid0 = 0x7ffffff0, kPid1 = 0x7ffffff1;

// Reports an exit for every pid it was told ended.
class FakeLauncher : public WorkerLauncher {
 public:
  bool lost = false;
  void End(pid_t pid, int status) { pending_.push_back({pid, status}); }
  StatusOr<pid_t> Start(uint32_t) override { return Internal("not used"); }
  Status Poll(std::vector<Exit>* exits) override {
    if (lost) return Unavailable("forkserver closed the connection");
    exits->insert(exits->end(), pending_.begin(), pending_.end());
    pending_.clear();
    return Status::Ok();
  }

 private:
  std::vector<Exit> pending_;
};

// Signals recorded with the fake time they were sent at; SIGKILL (and SIGTERM, when the workers
// heed it) ends the fake worker.
class SignalsEnd : public testing::FakeProcessControl {
 public:
  SignalsEnd(FakeLauncher& launcher, testing::FakeClock& clock, const uint64_t& t0,
             const bool& kill_on_term)
      : launcher_(launcher), clock_(clock), t0_(t0), kill_on_term_(kill_on_term) {}
  std::vector<uint64_t> at_ms;  // when each of `signals` was sent, after the run's start
  void Signal(pid_t pid, int sig) override {
    FakeProcessControl::Signal(pid, sig);
    at_ms.push_back((clock_.mono - t0_) / 1000000);
    if (sig == SIGKILL || kill_on_term_) launcher_.End(pid, sig);
  }

 private:
  FakeLauncher& launcher_;
  testing::FakeClock& clock_;
  const uint64_t& t0_;
  const bool& kill_on_term_;
};

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = "shoal.supervisor-test-" + std::to_string(getpid()) + ".scoreboard";
    auto b = Scoreboard::Create(name_, 2);
    ASSERT_TRUE(b.ok()) << b.status().message();
    board_ = std::make_unique<Scoreboard>(std::move(b).value());
    spec_.set_sample_interval_ms(50);
  }
  void TearDown() override { ShmSegment::Remove(name_); }

  // Watches the two fake workers to the end on the fake clock, one look every 5 ms of it;
  // `script(ms)` runs before each look: what the workers do by then, ms after the start.
  std::string Run(std::string failure = "", const std::function<void(uint64_t ms)>& script = {}) {
    WorkerSupervisor::Hooks hooks;
    hooks.oom_kills_before = oom_before_;
    hooks.oom_kills = [this] { return oom_now_; };
    hooks.exited = [](const ipc::v1::WorkerExited&) {};
    hooks.progress = [this] { ++progress_; };
    hooks.stop_signal = [this] { return stop_signal_; };
    WorkerSupervisor sup(spec_, *board_, launcher_, proc_, clock_, hooks);
    t0_ = clock_.mono;
    sup.Begin({{kPid0, 0}, {kPid1, 1}}, {t0_, t0_}, failure);
    for (;;) {
      elapsed_ms_ = (clock_.mono - t0_) / 1000000;
      if (script) script(elapsed_ms_);
      if (sup.Advance()) break;
      if (elapsed_ms_ > fake_limit_ms_) {
        ADD_FAILURE() << "still watching after " << fake_limit_ms_ << " ms of fake time";
        break;
      }
      clock_.Advance(uint64_t(WorkerSupervisor::kLookEveryMs) * 1000000);
    }
    exits_ = sup.exits();
    signals_ = proc_.signals;
    return sup.failure();
  }
  // What a worker's own threads would write, read off the fake clock.
  void Beat(uint32_t i) { board_->slot(i)->heartbeat_ns.store(clock_.mono); }
  void Moves(uint32_t i) { board_->slot(i)->progress_ns.store(clock_.mono); }
  void Phase(uint32_t i, WorkerPhase p) { board_->slot(i)->phase.store(static_cast<uint32_t>(p)); }
  // Both workers training, no bound given (the spec's default), no stall detection.
  void TwoTrainingWithTheDefaultBound() {
    spec_.set_stall_timeout_ms(0);
    spec_.set_step_timeout_ms(1800000);
    spec_.set_step_timeout_why("the default");
    kill_on_term_ = false;
    Phase(0, WorkerPhase::kTraining);
    Phase(1, WorkerPhase::kTraining);
  }

  std::string name_;
  std::unique_ptr<Scoreboard> board_;
  v1::ExperimentSpec spec_;
  FakeLauncher launcher_;
  testing::FakeClock clock_;
  uint64_t t0_ = 0, elapsed_ms_ = 0, fake_limit_ms_ = 60000;
  bool kill_on_term_ = true;
  SignalsEnd proc_{launcher_, clock_, t0_, kill_on_term_};
  std::optional<uint64_t> oom_before_, oom_now_;  // the kernel's OOM-kill count
  int progress_ = 0;
  int stop_signal_ = 0;  // what the leader's handler was told to stop by
  std::vector<std::pair<pid_t, int>> signals_;
  std::vector<ipc::v1::WorkerExited> exits_;
};

// Run, the leader's driver, looks on the real clock: exits already there end it at once.
TEST(WorkerSupervisorTest, RunWatchesUntilEveryWorkerHasEnded) {
  const std::string name = "shoal.supervisor-run-" + std::to_string(getpid()) + ".scoreboard";
  auto board = Scoreboard::Create(name, 2);
  ASSERT_TRUE(board.ok());
  v1::ExperimentSpec spec;
  spec.set_sample_interval_ms(50);
  FakeLauncher launcher;
  launcher.End(kPid0, 0);
  launcher.End(kPid1, 1 << 8);
  testing::FakeProcessControl proc;
  RealClock clock;
  WorkerSupervisor::Hooks hooks;
  hooks.exited = [](const ipc::v1::WorkerExited&) {};
  hooks.progress = [] {};
  WorkerSupervisor sup(spec, *board, launcher, proc, clock, hooks);
  const uint64_t now = MonotonicNs();
  EXPECT_EQ(sup.Run({{kPid0, 0}, {kPid1, 1}}, {now, now}, ""), "worker 1 exited with code 1");
  EXPECT_EQ(sup.exits().size(), 2u);
  ShmSegment::Remove(name);
}

TEST_F(SupervisorTest, CleanExitsAreNoFailure) {
  launcher_.End(kPid0, 0);
  launcher_.End(kPid1, 0);
  EXPECT_EQ(Run(), "");
  EXPECT_TRUE(signals_.empty());
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_EQ(exits_[1].index(), 1u);
}

TEST_F(SupervisorTest, AFailedWorkerStopsTheOthers) {
  launcher_.End(kPid1, 3 << 8);  // worker 1 exited with code 3
  EXPECT_EQ(Run(), "worker 1 exited with code 3");
  ASSERT_EQ(signals_.size(), 1u);
  EXPECT_EQ(signals_[0], (std::pair<pid_t, int>{kPid0, SIGTERM}));
}

TEST_F(SupervisorTest, AFailedWorkersOwnWordsReachTheError) {
  const std::string oom = "CUDA out of memory. Tried to allocate 2.00 GiB";
  EXPECT_EQ(WorkerFails(board_->slot(1), 1, oom), 1);
  launcher_.End(kPid1, 1 << 8);
  EXPECT_EQ(Run(), "worker 1 exited with code 1: " + oom);
  // A message longer than the slot is cut, not overrun.
  EXPECT_EQ(WorkerFails(board_->slot(0), 0, std::string(1000, 'x')), 1);
  EXPECT_EQ(SlotError(*board_->slot(0)), std::string(256, 'x'));
}

// A cancel's SIGTERM reaches the leader and its workers together: the leader's stop is the
// reason, not the worker that died of the same signal first, and every worker is killed at once
// (no grace: the run's figures are read at the stop).
TEST_F(SupervisorTest, AStopSignalKillsTheWorkersAtOnceAndIsTheReason) {
  TwoTrainingWithTheDefaultBound();
  uint64_t stopped_ms = 0;
  EXPECT_EQ(Run("",
                [&](uint64_t ms) {
                  if (ms != 100) return;
                  stop_signal_ = SIGTERM;
                  launcher_.End(kPid0, SIGTERM);  // the group's SIGTERM, reaped in this look
                  stopped_ms = ms;
                }),
            "stopped by signal 15 (SIGTERM)");
  EXPECT_EQ(stopped_ms, 100u);
  EXPECT_LE(elapsed_ms_, 100u + WorkerSupervisor::kLookEveryMs);
  std::set<pid_t> killed;
  for (const auto& [pid, sig] : signals_)
    if (sig == SIGKILL) killed.insert(pid);
  EXPECT_EQ(killed, (std::set<pid_t>{kPid0, kPid1}));
  for (uint64_t at : proc_.at_ms) EXPECT_EQ(at, 100u);
  EXPECT_EQ(exits_.size(), 2u);
}

// Already stopping (worker 1 failed; worker 0 ignores SIGTERM, as a rank that traps it may): a
// cancel then kills at once rather than after the 3 s grace, and the failure stays the reason.
TEST_F(SupervisorTest, AStopSignalWhileStoppingKillsAtOnceAndKeepsTheFirstReason) {
  TwoTrainingWithTheDefaultBound();
  launcher_.End(kPid1, 3 << 8);  // worker 1 exited with code 3
  EXPECT_EQ(Run("",
                [&](uint64_t ms) {
                  if (ms == 100) stop_signal_ = SIGTERM;
                }),
            "worker 1 exited with code 3");
  EXPECT_LE(elapsed_ms_, 100u + WorkerSupervisor::kLookEveryMs);
  ASSERT_EQ(signals_.size(), 2u);
  EXPECT_EQ(signals_[0], (std::pair<pid_t, int>{kPid0, SIGTERM}));
  EXPECT_EQ(signals_[1], (std::pair<pid_t, int>{kPid0, SIGKILL}));
  EXPECT_EQ(proc_.at_ms[1], 100u);
}

// A forkserver child that could not become the worker says why by its exit code alone.
TEST_F(SupervisorTest, AForkServerChildsExitCodeIsExplained) {
  spec_.set_start("forkserver");
  launcher_.End(kPid1, kNoProcessGroup << 8);
  EXPECT_EQ(Run(),
            "worker 1 exited with code 71: the forkserver's child could not join the "
            "experiment's process group (its leader gone?)");
  spec_.set_start("spawn");  // the same code from another process is only a code
  launcher_.End(kPid1, kNoProcessGroup << 8);
  EXPECT_EQ(Run(), "worker 1 exited with code 71");
}

TEST_F(SupervisorTest, AWorkerTheOomKillerTookIsSaidToBeOutOfMemory) {
  oom_before_ = 3;
  oom_now_ = 4;
  launcher_.End(kPid0, SIGKILL);
  EXPECT_EQ(Run(),
            "worker 0 killed by signal 9 (likely out of memory: the kernel's OOM killer killed 1 "
            "process(es) on this machine during this experiment)");
}

TEST_F(SupervisorTest, ASigkillWithoutAnOomKillIsJustASignal) {
  oom_before_ = 3;
  oom_now_ = 3;  // someone else's kill -9
  launcher_.End(kPid0, SIGKILL);
  EXPECT_EQ(Run(), "worker 0 killed by signal 9");
  oom_before_.reset();  // the count cannot be read: nothing is claimed
  oom_now_ = 9;
  launcher_.End(kPid0, SIGKILL);
  EXPECT_EQ(Run(), "worker 0 killed by signal 9");
}

// Stalled at the first look past the timeout (5 ms apart): killed then, and SIGKILL, which a
// stopped process cannot ignore.
TEST_F(SupervisorTest, AStallIsDetectedOnTheMonotonicClock) {
  spec_.set_stall_timeout_ms(200);
  kill_on_term_ = false;  // only SIGKILL ends the fake workers
  Phase(1, WorkerPhase::kFinished);
  EXPECT_EQ(Run(), "worker 0 stalled (no heartbeat for 200 ms)");
  EXPECT_EQ(signals_.front(), (std::pair<pid_t, int>{kPid0, SIGKILL}));
  EXPECT_EQ(proc_.at_ms.front(), 205u);
  // Worker 1 ignored SIGTERM: SIGKILL once the grace is over.
  EXPECT_EQ(signals_.back(), (std::pair<pid_t, int>{kPid1, SIGKILL}));
  EXPECT_EQ(proc_.at_ms.back(), 205u + WorkerSupervisor::kKillGraceNs / 1000000);
}

TEST_F(SupervisorTest, ZeroStallTimeoutMeansNoStallDetection) {
  spec_.set_stall_timeout_ms(0);
  EXPECT_EQ(Run("",
                [this](uint64_t ms) {
                  if (ms != 300) return;
                  launcher_.End(kPid0, 0);
                  launcher_.End(kPid1, 0);
                }),
            "");
  EXPECT_TRUE(signals_.empty());
  EXPECT_EQ(progress_, 6);  // a report every 50 ms: at 0, 50, ..., 250
}

// A worker deadlocked inside a step: its heartbeat thread beats on, but it marks no progress, and
// soon no other worker does either (they wait on it). Every training worker is killed, and the
// error gives each one's steps.
TEST_F(SupervisorTest, ARunInWhichNoWorkerMovesFails) {
  spec_.set_stall_timeout_ms(10000);
  spec_.set_step_timeout_ms(300);
  kill_on_term_ = false;
  for (uint32_t i = 0; i < 2; ++i) {  // worker 1 trained and evaluates: watched all the same
    Phase(i, i == 0 ? WorkerPhase::kTraining : WorkerPhase::kEvaluating);
    board_->slot(i)->steps.store(5 + i);
    Moves(i);
  }
  const std::string why = Run("", [this](uint64_t) {
    Beat(0);
    Beat(1);
  });
  EXPECT_EQ(why.rfind("no worker made progress for 300 ms while training (a step, batch or "
                      "evaluation that does not end: a deadlock, or work slower than "
                      "--step-timeout-ms); steps so far (the one that stopped first last moved "
                      "longest ago): worker 0: 5 (last moved ",
                      0),
            0u)
      << why;
  // How long ago each last moved, read off the same clock: the first look past the timeout.
  const auto moves = testing::LastMoves(why);
  ASSERT_EQ(moves.size(), 2u) << why;
  EXPECT_EQ(why.substr(why.size() - 8), " ms ago)") << why;
  EXPECT_EQ(moves[0].worker, 0);
  EXPECT_EQ(moves[0].steps, 5);
  EXPECT_EQ(moves[1].worker, 1);
  EXPECT_EQ(moves[1].steps, 6);
  EXPECT_EQ(moves[0].ms_ago, 305);
  EXPECT_EQ(moves[1].ms_ago, 305);
  std::set<std::pair<pid_t, int>> got(signals_.begin(), signals_.end());
  EXPECT_TRUE(got.count({kPid0, SIGKILL}) && got.count({kPid1, SIGKILL}));
}

// Not given a step timeout, a run is held, once a worker has moved twice, to 100x the slowest
// interval between its marks (here 400 ms: 40 s) rather than the half-hour default.
TEST_F(SupervisorTest, WithoutAGivenBoundTheBoundIsDerivedFromTheStepsSeen) {
  TwoTrainingWithTheDefaultBound();
  const std::string why = Run("", [this](uint64_t ms) {
    if (ms <= 2000 && ms % 400 == 0) Moves(0);  // then its step hangs
  });
  EXPECT_EQ(why.rfind("no worker made progress for 40000 ms (derived: 100x the slowest step seen, "
                      "400.0 ms, at least 30 s; --step-timeout-ms gives another) while training",
                      0),
            0u)
      << why;
  EXPECT_NEAR(double(elapsed_ms_), 42000, 10);  // the last move at 2 s, then the bound
}

// A step that hangs before any is measured (the first) fails the run in 10 minutes, not the
// spec's half-hour default, saying why.
TEST_F(SupervisorTest, AHangInTheFirstStepFailsTheRunInTenMinutes) {
  TwoTrainingWithTheDefaultBound();
  fake_limit_ms_ = 700000;
  const std::string why = Run("", [](uint64_t) {});
  EXPECT_EQ(why.rfind("no worker made progress for 600000 ms (the default until a step is "
                      "measured, at most 600 s; --step-timeout-ms gives another) while training",
                      0),
            0u)
      << why;
  EXPECT_NEAR(double(elapsed_ms_), 600000, 10);
}

// A bound given is kept whatever the steps measure; a derived one is never below 30 s.
TEST_F(SupervisorTest, AGivenBoundIsKeptAndADerivedOneHasAFloor) {
  TwoTrainingWithTheDefaultBound();
  std::string why = Run("", [this](uint64_t ms) {
    if (ms <= 100 && ms % 10 == 0) Moves(0);  // 10 ms steps: 1 s derived, 30 s the floor
  });
  EXPECT_EQ(why.rfind("no worker made progress for 30000 ms (derived: 100x the slowest step seen, "
                      "10.0 ms",
                      0),
            0u)
      << why;
}

// While any worker moves, the run is alive: worker 0 marks nothing, worker 1 progresses for
// twice the timeout and ends; then the live workers have made none for longer than the timeout
// (counted from worker 1's end, a phase change), and only worker 0 is named.
TEST_F(SupervisorTest, OneWorkerMovingKeepsTheRunAlive) {
  spec_.set_stall_timeout_ms(0);
  spec_.set_step_timeout_ms(300);
  Phase(0, WorkerPhase::kTraining);
  Phase(1, WorkerPhase::kTraining);
  const std::string why = Run("", [this](uint64_t ms) {
    if (ms < 600) Moves(1);
    if (ms != 600) return;
    Phase(1, WorkerPhase::kFinished);
    launcher_.End(kPid1, 0);
  });
  EXPECT_NE(why.find("no worker made progress for 300 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("longest ago): worker 0: 0 (never moved)"), std::string::npos) << why;
  EXPECT_EQ(why.find("worker 1"), std::string::npos) << why;
  EXPECT_EQ(proc_.at_ms.front(), 905u);
}

// multi_model's workers train in turn: worker 1 starts training after worker 0 trained for
// longer than the step timeout, and has not moved yet: it is not stuck. Each takes 100 ms to its
// first step, then moves for 500.
TEST_F(SupervisorTest, AWorkerThatStartsAfterWaitingItsTurnIsNotStuck) {
  spec_.set_stall_timeout_ms(0);
  spec_.set_step_timeout_ms(300);
  Phase(0, WorkerPhase::kTraining);
  EXPECT_EQ(Run("",
                [this](uint64_t ms) {
                  const uint32_t w = ms < 600 ? 0 : 1;
                  const uint64_t since = ms - w * 600;  // into its turn
                  if (since >= 100 && since < 600) Moves(w);
                  if (ms == 600) {
                    Phase(0, WorkerPhase::kFinished);
                    launcher_.End(kPid0, 0);
                    Phase(1, WorkerPhase::kTraining);
                  }
                  if (ms == 1200) {
                    Phase(1, WorkerPhase::kFinished);
                    launcher_.End(kPid1, 0);
                  }
                }),
            "");
  EXPECT_TRUE(signals_.empty());
  EXPECT_EQ(elapsed_ms_, 1200u);
}

// Hogwild's worker 0 waits for its peers (no step of its own) and then evaluates: the peers'
// steps and then its phase change are the run's progress.
TEST_F(SupervisorTest, AWorkerThatEvaluatesAfterWaitingForItsPeersIsNotStuck) {
  spec_.set_stall_timeout_ms(0);
  spec_.set_step_timeout_ms(300);
  for (uint32_t i = 0; i < 2; ++i) {
    Phase(i, WorkerPhase::kTraining);
    Moves(i);
  }
  EXPECT_EQ(Run("",
                [this](uint64_t ms) {
                  if (ms < 600) Moves(1);
                  if (ms == 600) {
                    Phase(1, WorkerPhase::kFinished);
                    launcher_.End(kPid1, 0);
                  }
                  if (ms == 650) Phase(0, WorkerPhase::kEvaluating);
                  if (ms == 850) {  // its first evaluation batch took 200 ms
                    Phase(0, WorkerPhase::kFinished);
                    launcher_.End(kPid0, 0);
                  }
                }),
            "");
  EXPECT_TRUE(signals_.empty());
  EXPECT_EQ(elapsed_ms_, 850u);
}

// Off, or a worker not yet training (still starting: loading, warming up), is never stuck.
TEST_F(SupervisorTest, NoStepTimeoutOrNoTrainingMeansNotStuck) {
  for (uint32_t timeout : {0u, 100u}) {
    spec_.set_stall_timeout_ms(0);
    spec_.set_step_timeout_ms(timeout);
    Phase(0, timeout == 0 ? WorkerPhase::kTraining : WorkerPhase::kStarting);
    EXPECT_EQ(Run("",
                  [this](uint64_t ms) {
                    if (ms != 400) return;
                    launcher_.End(kPid0, 0);
                    launcher_.End(kPid1, 0);
                  }),
              "")
        << timeout;
    EXPECT_TRUE(signals_.empty()) << timeout;
  }
}

TEST_F(SupervisorTest, ALostForkServerFailsAndKillsEveryone) {
  launcher_.lost = true;
  EXPECT_EQ(Run(), "lost the forkserver: forkserver closed the connection");
  std::set<std::pair<pid_t, int>> got(signals_.begin(), signals_.end());
  EXPECT_TRUE(got.count({kPid0, SIGKILL}) && got.count({kPid1, SIGKILL}));
}

TEST_F(SupervisorTest, AnEarlyFailureStopsWhatStarted) {
  EXPECT_EQ(Run("starting worker 2: fork: out of memory"),
            "starting worker 2: fork: out of memory");
  EXPECT_EQ(signals_.size(), 2u);
}

// A forkserver that refuses worker 0 has already been asked for worker 1 and forks it: the
// launcher takes that reply too, so the leader knows and stops every worker there is.
TEST(ForkServerLauncherTest, WorkersForkedAfterAFailedOneAreStillReported) {
  testing::TempDir d;
  auto lfd = ListenPacket(d / "z.sock");
  ASSERT_TRUE(lfd.ok()) << lfd.status().message();
  std::thread forkserver([&] {
    const int c = ::accept(*lfd, nullptr, nullptr);
    for (int i = 0; i < 2; ++i) {
      std::string msg;
      std::vector<int> fds;
      if (!RecvPacket(c, &msg, &fds).ok()) break;
      for (int f : fds) ::close(f);
      ipc::v1::ForkServerReply r;
      if (i == 0)
        r.mutable_error()->set_message("fork: Resource temporarily unavailable");
      else
        r.mutable_forked()->set_pid(4242);
      (void)SendPacket(c, EncodePacket(r));
    }
    ::close(c);
  });
  int life[2];
  ASSERT_EQ(::pipe(life), 0);
  LaunchContext c;
  c.spec.set_start("forkserver");
  c.spec.set_stall_timeout_ms(5000);
  c.fork_server_socket = d / "z.sock";
  c.lifetime_read_fd = life[0];
  auto launcher = MakeLauncher(c, nullptr);
  ASSERT_TRUE(launcher.ok()) << launcher.status().message();
  std::vector<pid_t> pids;
  const Status st = (*launcher)->StartAll(
      2, [](uint32_t) {}, &pids);
  forkserver.join();
  EXPECT_NE(st.message().find("Resource temporarily unavailable"), std::string::npos)
      << st.message();
  EXPECT_EQ(pids, (std::vector<pid_t>{-1, 4242}));
  for (int f : {life[0], life[1], *lfd}) ::close(f);
}

// The fork and spawn launchers on fake OS seams: what each asks the OS for, how a start that
// fails is reported, and that exits come from the one reaper.
class LauncherTest : public ::testing::Test {
 protected:
  LaunchContext Context(const std::string& start) {
    LaunchContext c;
    c.spec.set_start(start);
    c.experiment_id = "x7";
    c.worker_bin = "/opt/shoal/shoal-worker";
    c.lifetime_read_fd = 11;
    c.lifetime_write_fd = 12;
    c.status_fd = 3;
    c.processes = &proc_;
    c.children = &children_;
    return c;
  }
  testing::FakeProcessControl proc_;
  testing::FakeChildWaiter children_;
};

TEST_F(LauncherTest, ForkForksOneChildPerWorkerAndReapsThemThroughTheWaiter) {
  auto launcher = MakeLauncher(Context("fork"), [](uint32_t i) { return int(i); });
  ASSERT_TRUE(launcher.ok()) << launcher.status().message();
  std::vector<pid_t> pids;
  std::vector<uint32_t> asked;
  ASSERT_TRUE((*launcher)
                  ->StartAll(
                      2, [&](uint32_t i) { asked.push_back(i); }, &pids)
                  .ok());
  EXPECT_EQ(pids, (std::vector<pid_t>{1000, 1001}));
  EXPECT_EQ(asked, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(proc_.forked.size(), 2u);
  EXPECT_TRUE(proc_.spawned.empty());
  children_.ended = {{1001, 9}, {1000, 0}};  // worker 1 killed by SIGKILL, worker 0 clean
  std::vector<WorkerLauncher::Exit> exits;
  ASSERT_TRUE((*launcher)->Poll(&exits).ok());
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_EQ(exits[0].pid, 1001);
  EXPECT_TRUE(WIFSIGNALED(exits[0].status) && WTERMSIG(exits[0].status) == SIGKILL);
  EXPECT_EQ(exits[1].pid, 1000);
  exits.clear();
  ASSERT_TRUE((*launcher)->Poll(&exits).ok());
  EXPECT_TRUE(exits.empty());  // nothing more ended
}

TEST_F(LauncherTest, SpawnStartsAFreshWorkerThatAttachesByNameWithTheLifetimePipeAsFd4) {
  auto launcher = MakeLauncher(Context("spawn"), nullptr);
  ASSERT_TRUE(launcher.ok()) << launcher.status().message();
  auto pid = (*launcher)->Start(1);
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  ASSERT_EQ(proc_.spawned.size(), 1u);
  const std::vector<std::string>& argv = proc_.spawned[0];
  EXPECT_EQ(argv[0], "/opt/shoal/shoal-worker");
  auto after = [&](const std::string& flag) {
    auto it = std::find(argv.begin(), argv.end(), flag);
    return it == argv.end() || it + 1 == argv.end() ? std::string("(absent)") : *(it + 1);
  };
  EXPECT_EQ(after("--role"), "worker");
  EXPECT_EQ(after("--experiment"), "x7");
  EXPECT_EQ(after("--index"), "1");
  EXPECT_EQ(after("--lifetime-fd"), "4");
  EXPECT_EQ(after("--parent"), std::to_string(getpid()));
  EXPECT_EQ(proc_.spawn_options[0].dup_fds, (std::vector<std::pair<int, int>>{{11, 4}}));
  EXPECT_FALSE(proc_.spawn_options[0].new_process_group);  // it stays in the leader's group
  EXPECT_TRUE(proc_.forked.empty());
}

// A worker that never starts: the start stops at it, the workers before it are known (so the
// leader stops them), and the OS's words reach the error.
TEST_F(LauncherTest, AWorkerThatCannotStartStopsTheStartAndSaysWhy) {
  for (const std::string start : {"fork", "spawn"}) {
    testing::FakeProcessControl proc;
    proc_ = proc;
    auto launcher = MakeLauncher(Context(start), [](uint32_t) { return 0; });
    ASSERT_TRUE(launcher.ok()) << launcher.status().message();
    std::vector<pid_t> pids;
    uint32_t asked = 0;
    ASSERT_TRUE((*launcher)
                    ->StartAll(
                        1, [&](uint32_t) { ++asked; }, &pids)
                    .ok());
    proc_.fail_fork = proc_.fail_spawn = true;
    const Status st = (*launcher)->StartAll(
        2, [&](uint32_t) { ++asked; }, &pids);
    EXPECT_FALSE(st.ok()) << start;
    EXPECT_NE(st.message().find(start == "fork" ? "fork: Cannot allocate" : "posix_spawn"),
              std::string::npos)
        << st.message();
    EXPECT_EQ(pids, (std::vector<pid_t>{1000}));  // the first start's worker only
    EXPECT_EQ(asked, 2u);                         // it stopped at the first failure
  }
}

// Kind command's report lines into a rank's slot: split anywhere, bad ones counted, the first
// opening the window, the curve thinned as it fills.
TEST_F(SupervisorTest, ACommandsReportsFillItsSlotAndBadLinesAreCounted) {
  WorkerSlot* slot = board_->slot(0);
  RankReports r(slot);
  const std::string two = R"({"step": 1, "samples": 8, "loss": 2.0, "forward_ms": 9})"
                          "\n"
                          R"({"samples": 8, "loss": 1.0, "forward_ms": 1.5})"
                          "\n";
  r.Feed(two.data(), 20);  // cut mid-line
  r.Feed(two.data() + 20, two.size() - 20);
  EXPECT_EQ(slot->steps.load(), 2u);
  EXPECT_EQ(slot->samples.load(), 8u);  // the first report's were made before the window
  const ipc::v1::WorkerReading w = ReadSlot(*slot, 0, true);
  EXPECT_FLOAT_EQ(w.first_loss(), 2.0f);
  EXPECT_FLOAT_EQ(w.last_loss(), 1.0f);
  EXPECT_EQ(w.curve_size(), 2);
  EXPECT_GT(w.first_step_ns(), 0u);
  EXPECT_EQ(w.forward_ns(), 1500000u);  // the window's step's, as its samples
  const std::string bad = std::string(
                              "not json\n{\"unknown\": 1}\n{\"samples\": -1}\n"
                              "{\"forward_ms\": -2}\n") +
                          std::string(70 << 10, 'x') + "\n{\"loss\": \"high\"}\n";
  r.Feed(bad.data(), bad.size());
  EXPECT_EQ(r.ignored(), 6u);
  EXPECT_EQ(slot->steps.load(), 2u);  // nothing of them trusted
  for (int i = 0; i < 600; ++i) {
    const std::string line = R"({"samples": 8, "loss": 0.5})"
                             "\n";
    r.Feed(line.data(), line.size());
  }
  const ipc::v1::WorkerReading after = ReadSlot(*slot, 0, true);
  EXPECT_EQ(after.steps(), 602u);
  ASSERT_GT(after.curve_size(), 64);
  ASSERT_LE(after.curve_size(), int(kCurvePoints));
  for (int k = 1; k < after.curve_size(); ++k)
    EXPECT_GT(after.curve(k).step(), after.curve(k - 1).step()) << k;
  EXPECT_GT(after.curve(after.curve_size() - 1).step(), 500u);  // it reaches the end
}

}  // namespace
}  // namespace shoal
