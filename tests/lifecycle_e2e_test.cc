// Faults, each with real processes: a worker killed or stalled, the daemon killed mid-run, the
// forkserver killed, admission and data roots; and a chaos loop that kills a random process.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "shared/os/shm.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::LastMoves;
using testing::ProcessAlive;
using testing::TempDir;
using testing::WaitFor;

using testing::Parse;

class Lifecycle : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(StartDaemon()); }

  bool StartDaemon() {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    return daemon_->Start({"--grace-ms", "1000"});
  }

  json Get(const std::string& id) { return Parse(daemon_->Cli({"get", id, "--json"})); }

  std::string Submit(std::vector<std::string> args) {
    args.insert(args.begin(), "submit");
    args.push_back("--json");
    CommandResult r = daemon_->Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Parse(r).value("id", "");
  }

  // Waits until every worker of a running experiment has taken a step.
  json WaitTraining(const std::string& id, size_t workers) {
    json e;
    WaitFor(
        [&] {
          e = Get(id);
          if (e.value("state", "") != "RUNNING" || e["processes"].size() != workers + 1)
            return false;
          for (const auto& p : e["processes"])
            if (p["role"] == "worker" && !p["start_ms"].is_number())
              return false;  // absent: not yet
          return true;
        },
        60);
    return e;
  }

  // A data_loading run's loader (worker 1) stopped once the trainer has taken 3 steps: the
  // trainer then waits on it forever, its heartbeat still beating. `e`: the record just before.
  void StopTheLoaderOnceTraining(const std::string& id, json* e) {
    *e = WaitTraining(id, 2);
    WaitFor(
        [&] {
          *e = Get(id);
          for (const auto& p : (*e)["processes"])
            if (p["role"] == "worker" && p["index"] == 0) return p["steps"].get<uint64_t>() >= 3;
          return false;
        },
        60);
    ASSERT_EQ((*e)["state"], "RUNNING") << e->dump();
    ASSERT_EQ(Signal(WorkerPid(*e, 1), SIGSTOP), 0);
  }
  json WaitEnded(const std::string& id, double seconds = 30) {
    json e;
    WaitFor(
        [&] {
          e = Get(id);
          return e.is_object() && e.value("state", "") != "RUNNING" &&
                 e.value("state", "") != "QUEUED";
        },
        seconds);
    return e;
  }

  static pid_t WorkerPid(const json& e, int index) {
    for (const auto& p : e["processes"])
      if (p["role"] == "worker" && p["index"] == index) return p["pid"].get<int>();
    return -1;
  }
  static pid_t LeaderPid(const json& e) {
    for (const auto& p : e["processes"])
      if (p["role"] == "leader") return p["pid"].get<int>();
    return -1;
  }
  // kill() of one process of the record. A pid the record lacks (-1) or a 0 read from it would
  // signal every process we may signal, or our own group: that fails the test instead.
  static int Signal(pid_t pid, int sig) {
    if (pid <= 0) {
      ADD_FAILURE() << "no such process in the record (pid " << pid << ")";
      return -1;
    }
    return ::kill(pid, sig);
  }

  // No process of the experiment runs, and /dev/shm holds none of its segments.
  static int Leaks(const json& e, const std::vector<pid_t>& pids) {
    int leaks = static_cast<int>(ListSegments(SegmentPrefix(e["id"].get<std::string>())).size());
    for (pid_t p : pids) leaks += ProcessAlive(p) ? 1 : 0;
    return leaks;
  }
  static std::vector<pid_t> Pids(const json& e) {
    std::vector<pid_t> out;
    for (const auto& p : e["processes"]) out.push_back(p["pid"].get<int>());
    return out;
  }

  bool KillAndRestartDaemon(const std::string& id, const std::vector<pid_t>& pids, int round,
                            int* leaks);
  int LostRecords(const std::vector<std::string>& ids);

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

class WorkerKilled : public Lifecycle, public ::testing::WithParamInterface<const char*> {};

TEST_P(WorkerKilled, FailsWithTheReasonAndStopsEverything) {
  const std::string id = Submit(
      {"--workers", "3", "--start", GetParam(), "--batches", "100000", "--dataset", "synthetic"});
  json e = WaitTraining(id, 3);
  ASSERT_EQ(e["state"], "RUNNING") << e.dump();
  const auto pids = Pids(e);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Signal(WorkerPid(e, 1), SIGKILL), 0) << e.dump();  // the record, to see why
  e = WaitEnded(id);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_NE(e["error"].get<std::string>().find("worker 1 killed by signal 9"), std::string::npos)
      << e["error"];
  EXPECT_LT(took, 10.0);
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, pids) == 0; }, 5));
  EXPECT_EQ(daemon_->Cli({"node"}).exit_code, 0);  // still serving
}

INSTANTIATE_TEST_SUITE_P(StartMethods, WorkerKilled,
                         ::testing::Values("fork", "spawn", "forkserver"));

// A data_loading loader that dies fails the run at once: the trainer waiting on its batch is
// stopped, nothing is left in /dev/shm (the ring included).
// A forked worker does not keep the leader's cleanup handler: a SIGINT (or SIGHUP) sent to it
// kills that worker, which is then the run's reason, instead of taking the group down unexplained.
TEST_F(Lifecycle, ASigintToAForkedWorkerIsThatWorkersDeath) {
  const std::string id = Submit(
      {"--workers", "2", "--start", "fork", "--batches", "100000", "--dataset", "synthetic"});
  json e = WaitTraining(id, 2);
  ASSERT_EQ(e["state"], "RUNNING") << e.dump();
  const auto pids = Pids(e);
  ASSERT_EQ(Signal(WorkerPid(e, 1), SIGINT), 0);
  e = WaitEnded(id);
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_NE(e["error"].get<std::string>().find("worker 1 killed by signal 2"), std::string::npos)
      << e["error"];
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, pids) == 0; }, 5));
}

TEST_F(Lifecycle, DeadLoaderFailsTheRunCleanly) {
  const std::string id = Submit({"--kind", "data_loading", "--loaders", "2", "--start", "fork",
                                 "--epochs", "100", "--dataset", "synthetic"});
  json e = WaitTraining(id, 3);
  ASSERT_EQ(e["state"], "RUNNING") << e.dump();
  const auto pids = Pids(e);
  ASSERT_EQ(Signal(WorkerPid(e, 2), SIGKILL), 0);
  e = WaitEnded(id);
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_NE(e["error"].get<std::string>().find("worker 2 killed by signal 9"), std::string::npos)
      << e["error"];
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, pids) == 0; }, 5));
}

TEST_F(Lifecycle, StalledWorkerFails) {
  const std::string id = Submit({"--workers", "2", "--batches", "100000", "--dataset", "synthetic",
                                 "--stall-timeout-ms", "1500"});
  json e = WaitTraining(id, 2);
  const auto pids = Pids(e);
  ASSERT_EQ(Signal(WorkerPid(e, 0), SIGSTOP), 0);
  e = WaitEnded(id);
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_NE(e["error"].get<std::string>().find("worker 0 stalled (no heartbeat for 1500 ms)"),
            std::string::npos)
      << e["error"];
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, pids) == 0; }, 5));
}

// Heartbeats alone miss a worker that is alive but never moves. Here the trainer of data_loading
// waits forever on a loader that no longer runs (stopped, with stall detection set long so that it
// is not what catches it): once neither has moved for the step timeout, the run fails with each
// one's steps, and nothing is left. 8 s: well past a step here, warm-up included.
TEST_F(Lifecycle, ARunInWhichNoWorkerMovesFails) {
  const std::string id = Submit({"--kind", "data_loading", "--loaders", "1", "--start", "fork",
                                 "--epochs", "100", "--dataset", "synthetic", "--stall-timeout-ms",
                                 "600000", "--step-timeout-ms", "8000"});
  json e;
  ASSERT_NO_FATAL_FAILURE(StopTheLoaderOnceTraining(id, &e));
  const auto pids = Pids(e);
  const auto t0 = std::chrono::steady_clock::now();
  e = WaitEnded(id);
  // The trainer drains the batches already made; the loader's last may precede the stop a little.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(7));
  EXPECT_EQ(e["state"], "FAILED");
  const std::string error = e["error"].get<std::string>();
  EXPECT_NE(error.find("no worker made progress for 8000 ms while training"), std::string::npos)
      << error;
  // A loader takes no steps; it stopped first, so it last moved longest ago.
  const auto moves = LastMoves(error);
  ASSERT_EQ(moves.size(), 2u) << error;
  EXPECT_TRUE(moves[0].worker == 0 && moves[1].worker == 1 && moves[1].steps == 0) << error;
  EXPECT_GE(moves[1].ms_ago, moves[0].ms_ago) << error;
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, pids) == 0; }, 5));
}

// Not given --step-timeout-ms, a run is held to a bound derived from its own steps (100x the
// slowest seen, at least 30 s), not the half-hour default: a step that never ends fails it in
// well under a minute here, saying how the bound was found.
TEST_F(Lifecycle, AHungStepFailsTheRunWithinABoundDerivedFromItsSteps) {
  const std::string id =
      Submit({"--kind", "data_loading", "--loaders", "1", "--start", "fork", "--epochs", "100",
              "--dataset", "synthetic", "--stall-timeout-ms", "600000"});
  json e;
  ASSERT_NO_FATAL_FAILURE(StopTheLoaderOnceTraining(id, &e));
  const auto pids = Pids(e);
  const auto t0 = std::chrono::steady_clock::now();
  // Its steps' pace sets the bound: about a minute here alone, more beside a busy ctest -j2.
  e = WaitEnded(id, 300);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::seconds(29));
  ASSERT_EQ(e["state"], "FAILED") << e.dump();
  const std::string error = e["error"].get<std::string>();
  const std::string lead = "no worker made progress for ";
  ASSERT_EQ(error.rfind(lead, 0), 0u) << error;
  const long bound_ms = std::stol(error.substr(lead.size()));
  EXPECT_GE(bound_ms, 30000) << error;   // the floor
  EXPECT_LT(bound_ms, 300000) << error;  // derived from steps, not the 30-minute default
  EXPECT_LT(took, std::chrono::milliseconds(bound_ms) + std::chrono::seconds(30));
  EXPECT_NE(error.find(" ms (derived: 100x the slowest step seen, "), std::string::npos) << error;
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, pids) == 0; }, 5));
}

TEST_F(Lifecycle, DaemonKilledMidRunTakesItsProcessesAndTheNextDaemonCleansUp) {
  const std::string a = Submit(
      {"--workers", "2", "--start", "forkserver", "--batches", "100000", "--dataset", "synthetic"});
  const std::string b =
      Submit({"--workers", "1", "--batches", "2", "--dataset", "synthetic", "--eval-samples", "0"});
  json e = WaitTraining(a, 2);
  ASSERT_EQ(e["state"], "RUNNING");
  auto pids = Pids(e);
  const pid_t forkserver = Parse(daemon_->Cli({"node", "--json"}))["fork_server_pid"].get<int>();
  pids.push_back(forkserver);
  daemon_->Stop(SIGKILL);
  // Every process dies with the daemon (PR_SET_PDEATHSIG, lifetime pipe).
  EXPECT_TRUE(WaitFor(
      [&] {
        for (pid_t p : pids)
          if (ProcessAlive(p)) return false;
        return true;
      },
      10));
  // The leader removed the segments as it went down: nobody else was there to do it.
  EXPECT_TRUE(WaitFor([&] { return ListSegments(SegmentPrefix(a)).empty(); }, 5));
  ASSERT_TRUE(StartDaemon());
  json ea = Get(a);
  EXPECT_EQ(ea["state"], "INTERRUPTED");
  EXPECT_TRUE(ListSegments(SegmentPrefix(a)).empty());
  // What the record had learnt while it ran outlives the daemon: its processes (none alive, their
  // ends unknown), when each started training, and the environment; its wall time is unknown, so
  // absent.
  ASSERT_EQ(ea["processes"].size(), 3u) << ea.dump(2);
  for (const auto& p : ea["processes"]) {
    EXPECT_FALSE(p["alive"].get<bool>());
    EXPECT_FALSE(p["exit_known"].get<bool>());
    if (p["role"] == "worker") {
      EXPECT_TRUE(p["start_ms"].is_number()) << p.dump();
    }
  }
  EXPECT_TRUE(ea["environment"].contains("PATH")) << ea.dump(2);
  EXPECT_TRUE(ea["result"]["wall_ms"].is_null()) << ea["result"].dump();
  // The queue goes on.
  json eb = WaitEnded(b, 60);
  EXPECT_EQ(eb["state"], "SUCCEEDED") << eb.dump();
}

// A stopped process in the experiment's group when shoald dies: the orphaned group gets SIGHUP
// (and SIGCONT) from the kernel, possibly before the leader's SIGTERM, and the leader still
// removes the segments with nobody else there to do it.
TEST_F(Lifecycle, DaemonKilledWhileAWorkerIsStoppedLeavesNoSegment) {
  const std::string a = Submit(
      {"--workers", "2", "--start", "spawn", "--batches", "100000", "--dataset", "synthetic"});
  json e = WaitTraining(a, 2);
  ASSERT_EQ(e["state"], "RUNNING");
  const auto pids = Pids(e);
  ASSERT_EQ(Signal(WorkerPid(e, 1), SIGSTOP), 0);
  daemon_->Stop(SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, pids) == 0; }, 10))
      << ListSegments(SegmentPrefix(a)).size() << " segment(s) left";
}

// A forkserver that is alive but does not answer (stopped here) fails a forkserver run after
// the stall timeout, naming it, instead of holding the run and the queue behind it forever; once
// it answers again it serves the next run.
TEST_F(Lifecycle, AStoppedForkServerFailsTheRunAfterTheStallTimeout) {
  const std::vector<std::string> small = {"--workers",      "2", "--start",   "forkserver",
                                          "--batches",      "2", "--dataset", "synthetic",
                                          "--eval-samples", "0"};
  // A run first, so that the forkserver is up and listening (one that never listens is the
  // test below).
  ASSERT_EQ(WaitEnded(Submit(small), 60)["state"], "SUCCEEDED");
  const pid_t forkserver = Parse(daemon_->Cli({"node", "--json"}))["fork_server_pid"].get<int>();
  ASSERT_GT(forkserver, 0);
  ASSERT_EQ(::kill(forkserver, SIGSTOP), 0);
  const std::string a = Submit({"--workers", "2", "--start", "forkserver", "--batches", "5",
                                "--dataset", "synthetic", "--stall-timeout-ms", "1500"});
  json e = WaitEnded(a, 30);
  ::kill(forkserver, SIGCONT);
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_NE(e["error"].get<std::string>().find(
                "the forkserver did not answer a fork request within 1500 ms"),
            std::string::npos)
      << e["error"];
  EXPECT_TRUE(WaitFor([&] { return Leaks(e, Pids(e)) == 0; }, 10));
  EXPECT_EQ(WaitEnded(Submit(small), 60)["state"], "SUCCEEDED");
}

// A forkserver that never comes up (a stand-in that never listens) holds its run queued; a
// cancel or shoald's shutdown ends that wait at once, not after the minute a boot is given, and
// the run held at shutdown is run by the next shoald.
TEST_F(Lifecycle, ACancelOrShutdownEndsTheWaitForAForkServerThatNeverComesUp) {
  const std::string bin = dir_ / "never-listening-forkserver";
  std::ofstream(bin)
      << "#!/bin/sh\ncase \" $* \" in *\" --role forkserver \"*) exec sleep 600;; esac\n"
      << "exec " << testing::BinDir() << "/shoal-worker \"$@\"\n";
  std::filesystem::permissions(bin, std::filesystem::perms::owner_all);
  daemon_->Stop();
  ASSERT_TRUE(daemon_->Start({"--grace-ms", "1000", "--worker-bin", bin}));
  const std::vector<std::string> run = {"--start",   "forkserver", "--batches",      "2",
                                        "--dataset", "synthetic",  "--eval-samples", "0"};
  const std::string a = Submit(run);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(Get(a)["state"], "QUEUED");
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(daemon_->Cli({"cancel", a}).exit_code, 0);
  EXPECT_EQ(WaitEnded(a, 10)["state"], "CANCELLED");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));

  const std::string b = Submit(run);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  t0 = std::chrono::steady_clock::now();
  const int st = daemon_->Stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(StartDaemon());  // the real forkserver now
  EXPECT_EQ(WaitEnded(b, 60)["state"], "SUCCEEDED");
}

TEST_F(Lifecycle, KilledForkServerIsRestartedAndServes) {
  json n;
  ASSERT_TRUE(WaitFor(
      [&] {
        n = Parse(daemon_->Cli({"node", "--json"}));
        return n["fork_server_pid"].get<int>() > 0;
      },
      10));
  const pid_t first = n["fork_server_pid"].get<int>();
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  ASSERT_TRUE(WaitFor(
      [&] {
        n = Parse(daemon_->Cli({"node", "--json"}));
        return n["fork_server_pid"].get<int>() > 0 && n["fork_server_pid"].get<int>() != first;
      },
      10));
  EXPECT_GE(n["fork_server_restarts"].get<int>(), 1);
  CommandResult r =
      daemon_->Cli({"submit", "--workers", "2", "--start", "forkserver", "--batches", "2",
                    "--dataset", "synthetic", "--eval-samples", "0", "--wait", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Parse(r)["state"], "SUCCEEDED");
}

// A tiny MNIST-format directory under the state dir's data/ root is accepted; the same files
// elsewhere are not.
TEST_F(Lifecycle, DatasetsOnlyUnderDataRoots) {
  auto write = [](const std::string& path, std::vector<uint32_t> dims) {
    std::vector<uint8_t> b = {0, 0, 8, uint8_t(dims.size())};
    size_t n = 1;
    for (uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
      n *= d;
    }
    for (size_t i = 0; i < n; ++i) b.push_back(uint8_t(i % 10));
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, b.data(), unsigned(b.size()));
    gzclose(f);
  };
  TempDir outside;
  std::filesystem::create_directories(dir_ / "state/data/tiny");
  for (const std::string& d : {outside.path(), dir_ / "state/data/tiny"}) {
    write(d + "/train-images-idx3-ubyte.gz", {256, 28, 28});
    write(d + "/train-labels-idx1-ubyte.gz", {256});
  }
  CommandResult r = daemon_->Cli({"submit", "--dataset", outside.path()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("is outside the data roots"), std::string::npos) << r.err;
  r = daemon_->Cli(
      {"submit", "--dataset", dir_ / "state/data/tiny", "--batches", "2", "--wait", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json e = Parse(r);
  EXPECT_EQ(e["state"], "SUCCEEDED");
  EXPECT_TRUE(e["result"]["test_accuracy"].is_null());  // no t10k files: nothing to evaluate
}

// Chaos's daemon round: SIGKILL shoald, wait for the run's processes to die and its segments to
// go (the dying leader's work: no daemon is there), and start a new daemon; false if it did not.
bool Lifecycle::KillAndRestartDaemon(const std::string& id, const std::vector<pid_t>& pids,
                                     int round, int* leaks) {
  daemon_->Stop(SIGKILL);
  WaitFor(
      [&] {
        for (pid_t p : pids)
          if (ProcessAlive(p)) return false;
        return true;
      },
      10);
  if (!WaitFor([&] { return ListSegments(SegmentPrefix(id)).empty(); }, 5)) {
    ADD_FAILURE() << "round " << round << ": segments left after the daemon died";
    ++*leaks;
  }
  if (StartDaemon()) return true;
  ADD_FAILURE() << "daemon did not restart";
  return false;
}

// How many of `ids` the daemon's listing lacks.
int Lifecycle::LostRecords(const std::vector<std::string>& ids) {
  const json all = Parse(daemon_->Cli({"list", "--json"}));
  int lost = 0;
  for (const auto& id : ids) {
    bool found = false;
    for (const auto& e : all["experiments"])
      if (e["id"] == id) found = true;
    lost += found ? 0 : 1;
  }
  return lost;
}

// N rounds: start an experiment, kill a random process of it (worker, leader, forkserver or the
// daemon) at a random moment, then check that nothing leaked and the record is right.
TEST_F(Lifecycle, Chaos) {
  const char* env = std::getenv("SHOAL_CHAOS_ROUNDS");
  const int rounds = env ? std::atoi(env) : 4;
  ASSERT_GT(rounds, 0) << "SHOAL_CHAOS_ROUNDS=" << env << ": no rounds would pass without a test";
  // The seed is printed and SHOAL_CHAOS_SEED replays it: a failed round can be run again.
  const char* seed_env = std::getenv("SHOAL_CHAOS_SEED");
  const unsigned seed =
      seed_env ? unsigned(std::strtoul(seed_env, nullptr, 10)) : std::random_device{}();
  std::printf("chaos: %d rounds, SHOAL_CHAOS_SEED=%u\n", rounds, seed);
  RecordProperty("chaos_seed", std::to_string(seed));
  std::mt19937 rng(seed);
  const char* targets[] = {"worker", "leader", "forkserver", "daemon"};
  int faults = 0, leaks = 0, lost = 0, wrong = 0;
  std::vector<std::string> ids;
  for (int round = 0; round < rounds; ++round) {
    const std::string target = targets[rng() % 4];
    const char* starts[] = {"fork", "spawn", "forkserver"};
    const std::string start = target == "forkserver" ? "forkserver" : starts[rng() % 3];
    const std::string id = Submit(
        {"--workers", "2", "--start", start, "--batches", "100000", "--dataset", "synthetic"});
    ids.push_back(id);
    json e = WaitTraining(id, 2);
    if (e.value("state", "") != "RUNNING") {
      ++wrong;
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 1500));
    e = Get(id);
    auto pids = Pids(e);
    std::string want = "FAILED";
    if (target == "worker") {
      Signal(WorkerPid(e, int(rng() % 2)), SIGKILL);
    } else if (target == "leader") {
      Signal(LeaderPid(e), SIGKILL);
    } else if (target == "forkserver") {
      Signal(Parse(daemon_->Cli({"node", "--json"}))["fork_server_pid"].get<int>(), SIGKILL);
    } else {
      want = "INTERRUPTED";
      if (!KillAndRestartDaemon(id, pids, round, &leaks)) break;
    }
    ++faults;
    e = WaitEnded(id);
    if (e.value("state", "") != want) {
      ++wrong;
      ADD_FAILURE() << "round " << round << " (" << target << ", " << start << "): state "
                    << e.value("state", "?") << " want " << want << ": " << e.value("error", "");
    }
    WaitFor([&] { return Leaks(e, pids) == 0; }, 5);
    const int l = Leaks(e, pids);
    leaks += l;
    if (l) ADD_FAILURE() << "round " << round << " (" << target << "): " << l << " leaks";
  }
  lost = LostRecords(ids);
  EXPECT_EQ(daemon_->Cli({"node"}).exit_code, 0);
  std::printf(
      "chaos: rounds %d, faults injected %d, leaks found %d, records lost %d, wrong states %d\n",
      rounds, faults, leaks, lost, wrong);
  EXPECT_EQ(leaks, 0);
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(faults, rounds);
}

// Every process's stdout and stderr is captured per run, whoever started it: forked and spawned
// workers inherit the leader's, the forkserver hands its workers the leader's with the request.
// (SHOAL_ALLOC_STATS makes each worker on `cache` print a line at its end.) The log goes with its
// record.
TEST(Logs, EveryWorkerOfEveryStartMethodIsCapturedAndGoesWithItsRecord) {
  TempDir dir;
  Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start({}, {"SHOAL_ALLOC_STATS=1"}));
  std::map<std::string, std::string> ids;
  for (const std::string start : {"fork", "spawn", "forkserver"}) {
    const json e =
        Parse(d.Cli({"submit", "--workers", "2", "--start", start, "--batches", "2", "--batch-size",
                     "16", "--eval-samples", "0", "--allocator", "cache", "--wait", "--json"}));
    ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump();
    ids[start] = e["id"];
    const CommandResult logs = d.Cli({"logs", e["id"]});
    EXPECT_EQ(logs.exit_code, 0) << logs.err;
    for (const std::string w : {"worker 0 allocator: hits", "worker 1 allocator: hits"})
      EXPECT_NE(logs.out.find(w), std::string::npos) << start << ":\n" << logs.out;
  }
  const std::string log = dir / "state/logs/" + ids["fork"] + ".log";
  EXPECT_TRUE(std::ifstream(log).good());
  ASSERT_EQ(d.Cli({"rm", ids["fork"]}).exit_code, 0);
  EXPECT_FALSE(std::ifstream(log).good());
  const CommandResult gone = d.Cli({"logs", ids["fork"]});
  EXPECT_NE(gone.exit_code, 0);
  EXPECT_NE(gone.err.find("no experiment with id"), std::string::npos) << gone.err;
}

// utime + stime of a process, in clock ticks.
uint64_t CpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(rest), {}};
  return f.size() > 12 ? std::stoull(f[11]) + std::stoull(f[12]) : 0;
}

std::vector<pid_t> Children(pid_t pid) {
  const std::string p = std::to_string(pid);
  std::ifstream in("/proc/" + p + "/task/" + p + "/children");
  return {std::istream_iterator<pid_t>(in), {}};
}

// A forkserver that cannot fork (here: out of fds, as under a pids limit) tries again every
// 100 ms instead of spinning a core the runs are measured on, and fills its pool once it can.
TEST(ForkServer, AFailedForkWaitsBeforeTryingAgainAndThePoolRefillsLater) {
  TempDir dir;
  const std::string bin = testing::BinDir() + "/shoal-worker", sock = dir / "z.sock";
  const std::string parent = std::to_string(::getpid());
  const pid_t z = ::fork();
  if (z == 0) {
    rlimit few;  // LibTorch's and the forkserver's own fds, then some children; the hard limit kept
    ::getrlimit(RLIMIT_NOFILE, &few);
    few.rlim_cur = 40;
    ::setrlimit(RLIMIT_NOFILE, &few);
    ::execl(bin.c_str(), bin.c_str(), "--role", "forkserver", "--socket", sock.c_str(), "--pool",
            "64", "--parent", parent.c_str(), nullptr);
    _exit(127);
  }
  size_t stuck = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        const size_t before = Children(z).size();
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        stuck = Children(z).size();
        return stuck > 0 && stuck == before;
      },
      30));
  EXPECT_LT(stuck, 64u) << "the fd limit did not stop the pool";
  const uint64_t t0 = CpuTicks(z);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const uint64_t ticks = CpuTicks(z) - t0;
  EXPECT_LT(double(ticks) / double(::sysconf(_SC_CLK_TCK)), 0.15)
      << "the forkserver spun on its failed forks";
  rlimit more;
  ASSERT_EQ(::prlimit(z, RLIMIT_NOFILE, nullptr, &more), 0) << std::strerror(errno);
  more.rlim_cur = std::min<rlim_t>(more.rlim_max, 1024);
  ASSERT_EQ(::prlimit(z, RLIMIT_NOFILE, &more, nullptr), 0) << std::strerror(errno);
  EXPECT_TRUE(WaitFor([&] { return Children(z).size() == 64; }, 20)) << Children(z).size();
  const std::vector<pid_t> pool = Children(z);
  ::kill(z, SIGKILL);
  ::waitpid(z, nullptr, 0);
  for (pid_t c : pool)  // the idle children die with it
    EXPECT_TRUE(WaitFor([&] { return !ProcessAlive(c); }, 10)) << c;
}

// A cancelled run's figures are read at the cancel, not at the last periodic report: with reports
// a minute apart (none comes after the first step's), the steps its worker took are all counted.
TEST_F(Lifecycle, ACancelledRunsFiguresAreReadAtTheCancelNotAtTheLastReport) {
  const std::string id =
      Submit({"--workers", "1", "--batches", "100000", "--batch-size", "16", "--dataset",
              "synthetic", "--eval-samples", "0", "--sample-interval-ms", "60000"});
  const json e = WaitTraining(id, 1);
  const pid_t worker = WorkerPid(e, 0);
  // Seconds of training CPU are many steps (one is ~0.1 s of CPU here, the first few times that).
  const double tick = double(::sysconf(_SC_CLK_TCK));
  ASSERT_TRUE(WaitFor([&] { return double(CpuTicks(worker)) / tick > 3.0; }, 120));
  const json live = Get(id);
  ASSERT_EQ(live["state"], "RUNNING") << live.dump();
  const json& seen = live["result"]["steps"];  // null: no step reported yet
  const uint64_t reported = seen.is_number() ? seen.get<uint64_t>() : 0;
  ASSERT_EQ(daemon_->Cli({"cancel", id}).exit_code, 0);
  const json x = WaitEnded(id);
  ASSERT_EQ(x["state"], "CANCELLED") << x.dump();
  ASSERT_TRUE(x["result"]["steps"].is_number()) << x["result"].dump();
  const uint64_t steps = x["result"]["steps"].get<uint64_t>();
  EXPECT_GE(steps, 10u) << "the live record said " << reported;
  EXPECT_GT(steps, reported);
  ASSERT_TRUE(x["result"]["train_ms"].is_number()) << x["result"].dump();
  EXPECT_GT(x["result"]["train_ms"].get<double>(), 1000);
  EXPECT_TRUE(WaitFor([&] { return Leaks(x, Pids(x)) == 0; }, 10));
}

}  // namespace
}  // namespace shoal
