// The leader's watch over its workers on a fake launcher and a real scoreboard: exits, stalls,
// stop-all, a lost forkserver. No process is started and no signal reaches a process.
#include "worker/supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
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

// Reports an exit for every pid it was told ended, and for every pid signalled (as killed).
class FakeLauncher : public WorkerLauncher {
 public:
  bool lost = false;
  void End(pid_t pid, int status) {
    std::lock_guard<std::mutex> l(mu_);
    pending_.push_back({pid, status});
  }
  StatusOr<pid_t> Start(uint32_t) override { return Internal("not used"); }
  Status Poll(std::vector<Exit>* exits) override {
    if (lost) return Unavailable("forkserver closed the connection");
    std::lock_guard<std::mutex> l(mu_);
    exits->insert(exits->end(), pending_.begin(), pending_.end());
    pending_.clear();
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::vector<Exit> pending_;
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

  std::string Run(std::string failure = "") {
    WorkerSupervisor::Hooks hooks;
    hooks.oom_kills_before = oom_before_;
    hooks.oom_kills = [this] { return oom_now_; };
    hooks.exited = [](const ipc::v1::WorkerExited&) {};
    hooks.progress = [this] { ++progress_; };
    hooks.signal = [this](pid_t p, int sig) {
      signals_.push_back({p, sig});
      if (sig == SIGKILL || kill_on_term_) launcher_.End(p, sig);
    };
    WorkerSupervisor sup(spec_, *board_, launcher_, hooks);
    const uint64_t now = MonotonicNs();
    std::string out = sup.Run({{kPid0, 0}, {kPid1, 1}}, {now, now}, failure);
    exits_ = sup.exits();
    return out;
  }

  std::string name_;
  std::unique_ptr<Scoreboard> board_;
  v1::ExperimentSpec spec_;
  FakeLauncher launcher_;
  bool kill_on_term_ = true;
  std::optional<uint64_t> oom_before_, oom_now_;  // the kernel's OOM-kill count
  int progress_ = 0;
  std::vector<std::pair<pid_t, int>> signals_;
  std::vector<ipc::v1::WorkerExited> exits_;
};

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

TEST_F(SupervisorTest, AStallIsDetectedOnTheMonotonicClock) {
  spec_.set_stall_timeout_ms(200);
  kill_on_term_ = false;  // only SIGKILL ends the fake workers
  board_->slot(1)->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Run(), "worker 0 stalled (no heartbeat for 200 ms)");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  EXPECT_EQ(signals_.front(),
            (std::pair<pid_t, int>{kPid0, SIGKILL}));  // a stopped process ignores TERM
}

TEST_F(SupervisorTest, ZeroStallTimeoutMeansNoStallDetection) {
  spec_.set_stall_timeout_ms(0);
  std::thread later([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    launcher_.End(kPid0, 0);
    launcher_.End(kPid1, 0);
  });
  EXPECT_EQ(Run(), "");
  later.join();
  EXPECT_TRUE(signals_.empty());
  EXPECT_GE(progress_, 2);  // progress every 50 ms meanwhile
}

// A worker deadlocked inside a step: its heartbeat thread beats on, but it marks no progress, and
// soon no other worker does either (they wait on it). Every training worker is killed, and the
// error gives each one's steps.
TEST_F(SupervisorTest, ARunInWhichNoWorkerMovesFails) {
  spec_.set_stall_timeout_ms(10000);
  spec_.set_step_timeout_ms(300);
  kill_on_term_ = false;
  std::atomic<bool> done{false};
  for (uint32_t i = 0; i < 2; ++i) {  // worker 1 trained and evaluates: watched all the same
    board_->slot(i)->phase.store(
        static_cast<uint32_t>(i == 0 ? WorkerPhase::kTraining : WorkerPhase::kEvaluating));
    board_->slot(i)->steps.store(5 + i);
    board_->slot(i)->progress_ns.store(MonotonicNs());
  }
  std::thread beats([&] {
    while (!done) {
      for (uint32_t i = 0; i < 2; ++i) board_->slot(i)->heartbeat_ns.store(MonotonicNs());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = Run();
  EXPECT_EQ(why.rfind("no worker made progress for 300 ms while training (a step, batch or "
                      "evaluation that does not end: a deadlock, or work slower than "
                      "--step-timeout-ms); steps so far (the one that stopped first last moved "
                      "longest ago): worker 0: 5 (last moved ",
                      0),
            0u)
      << why;
  // How long ago each last moved: at least the timeout, and read off the same clock.
  const auto moves = testing::LastMoves(why);
  ASSERT_EQ(moves.size(), 2u) << why;
  EXPECT_EQ(why.substr(why.size() - 8), " ms ago)") << why;
  EXPECT_EQ(moves[0].worker, 0);
  EXPECT_EQ(moves[0].steps, 5);
  EXPECT_EQ(moves[1].worker, 1);
  EXPECT_EQ(moves[1].steps, 6);
  EXPECT_GE(moves[0].ms_ago, 300);
  EXPECT_GE(moves[1].ms_ago, 300);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(300));
  done = true;
  beats.join();
  std::set<std::pair<pid_t, int>> got(signals_.begin(), signals_.end());
  EXPECT_TRUE(got.count({kPid0, SIGKILL}) && got.count({kPid1, SIGKILL}));
}

// While any worker moves, the run is alive: worker 0 marks nothing, worker 1 progresses for
// twice the timeout and ends; then the live workers have made none for longer than the timeout,
// and only worker 0 is named.
TEST_F(SupervisorTest, OneWorkerMovingKeepsTheRunAlive) {
  spec_.set_stall_timeout_ms(0);
  spec_.set_step_timeout_ms(300);
  for (uint32_t i = 0; i < 2; ++i)
    board_->slot(i)->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  std::thread mover([this] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
    while (std::chrono::steady_clock::now() < end) {
      board_->slot(1)->progress_ns.store(MonotonicNs());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    board_->slot(1)->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
    launcher_.End(kPid1, 0);
  });
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = Run();
  mover.join();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(600));
  EXPECT_NE(why.find("no worker made progress for 300 ms"), std::string::npos) << why;
  EXPECT_NE(why.find("longest ago): worker 0: 0 (never moved)"), std::string::npos) << why;
  EXPECT_EQ(why.find("worker 1"), std::string::npos) << why;
}

// multi_model's workers train in turn: worker 1 starts training after worker 0 trained for
// longer than the step timeout, and has not moved yet: it is not stuck.
TEST_F(SupervisorTest, AWorkerThatStartsAfterWaitingItsTurnIsNotStuck) {
  spec_.set_stall_timeout_ms(0);
  spec_.set_step_timeout_ms(300);
  board_->slot(0)->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  std::thread turns([this] {
    for (uint32_t w : {0u, 1u}) {
      if (w == 1) board_->slot(1)->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its first step
      const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      while (std::chrono::steady_clock::now() < end) {
        board_->slot(w)->progress_ns.store(MonotonicNs());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      board_->slot(w)->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
      launcher_.End(w == 0 ? kPid0 : kPid1, 0);
    }
  });
  EXPECT_EQ(Run(), "");
  turns.join();
  EXPECT_TRUE(signals_.empty());
}

// Hogwild's worker 0 waits for its peers (no step of its own) and then evaluates: the peers'
// steps and then its phase change are the run's progress.
TEST_F(SupervisorTest, AWorkerThatEvaluatesAfterWaitingForItsPeersIsNotStuck) {
  spec_.set_stall_timeout_ms(0);
  spec_.set_step_timeout_ms(300);
  for (uint32_t i = 0; i < 2; ++i) {
    board_->slot(i)->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
    board_->slot(i)->progress_ns.store(MonotonicNs());
  }
  std::thread run([this] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
    while (std::chrono::steady_clock::now() < end) {
      board_->slot(1)->progress_ns.store(MonotonicNs());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    board_->slot(1)->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
    launcher_.End(kPid1, 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    board_->slot(0)->phase.store(static_cast<uint32_t>(WorkerPhase::kEvaluating));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its first evaluation batch
    board_->slot(0)->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
    launcher_.End(kPid0, 0);
  });
  EXPECT_EQ(Run(), "");
  run.join();
  EXPECT_TRUE(signals_.empty());
}

// Off, or a worker not yet training (still starting: loading, warming up), is never stuck.
TEST_F(SupervisorTest, NoStepTimeoutOrNoTrainingMeansNotStuck) {
  for (uint32_t timeout : {0u, 100u}) {
    spec_.set_stall_timeout_ms(0);
    spec_.set_step_timeout_ms(timeout);
    board_->slot(0)->phase.store(
        static_cast<uint32_t>(timeout == 0 ? WorkerPhase::kTraining : WorkerPhase::kStarting));
    std::thread later([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      launcher_.End(kPid0, 0);
      launcher_.End(kPid1, 0);
    });
    EXPECT_EQ(Run(), "") << timeout;
    later.join();
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
  const ipc::v1::WorkerReport w = ReadSlot(*slot, 0, true);
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
  const ipc::v1::WorkerReport after = ReadSlot(*slot, 0, true);
  EXPECT_EQ(after.steps(), 602u);
  ASSERT_GT(after.curve_size(), 64);
  ASSERT_LE(after.curve_size(), int(kCurvePoints));
  for (int k = 1; k < after.curve_size(); ++k)
    EXPECT_GT(after.curve(k).step(), after.curve(k - 1).step()) << k;
  EXPECT_GT(after.curve(after.curve_size() - 1).step(), 500u);  // it reaches the end
}

}  // namespace
}  // namespace shoal
