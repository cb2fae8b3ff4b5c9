// Kind command end to end: the real shoald (started with --allow-commands) runs a user's Python
// program as N ranks with torchrun's environment, measures them and their children, reads their
// reports, fails the run like torchrun when a rank fails, and refuses what must not run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "tests/testutil.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::Parse;
using testing::TempDir;

// Writes what it was given to OUT/rank<RANK>.json, holds ~40 MB, starts a child holding ~20 MB
// (a DataLoader worker's stand-in), reports STEPS steps of 32 samples; rank 0 also writes a line
// that is not JSON and one of 10 MB. FAIL=<rank>:<code|kill> makes that rank fail after a step.
constexpr const char* kScript = R"PY(
import json, os, signal, subprocess, sys, time
import shoal_report
out, steps = sys.argv[1], int(os.environ.get("STEPS", "5"))
rank = int(os.environ["RANK"])
print("hello from rank %d" % rank, flush=True)
print("and its stderr", file=sys.stderr, flush=True)
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TAG", "LD_PRELOAD"]
seen = {k: os.environ.get(k) for k in keys}
seen["argv"] = sys.argv[2:]
seen["cwd"] = os.getcwd()
with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
    json.dump(seen, f)
ballast = bytearray(40 << 20)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
child = subprocess.Popen([sys.executable, "-c",
    "import time\nb = bytearray(20 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\n"
    "time.sleep(30)"])
if rank == 0:
    fd = int(os.environ["SHOAL_REPORT_FD"])
    os.write(fd, b"not json\n" + b"x" * (10 << 20) + b"\n")
fail = os.environ.get("FAIL", "")
for step in range(1, steps + 1):
    time.sleep(0.3)
    shoal_report.step(samples=32, loss=1.0 / step, forward_ms=2.0)
    if fail and int(fail.split(":")[0]) == rank:
        child.kill()
        if fail.split(":")[1] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(int(fail.split(":")[1]))
    if fail:
        time.sleep(60)
child.kill()
child.wait()
)PY";

class CommandE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    std::ofstream(dir_ / "train.py") << kScript;
    fs::create_directories(dir_ / "out");
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start({"--allow-commands", "--grace-ms", "1000"}));
  }
  std::vector<std::string> Submit(const std::vector<std::string>& flags,
                                  const std::vector<std::string>& args = {}) {
    std::vector<std::string> a = {"submit",
                                  "--kind",
                                  "command",
                                  "--wait",
                                  "--json",
                                  "--env",
                                  "PYTHONPATH=" + std::string(SHOAL_SOURCE_DIR) + "/client/python"};
    a.insert(a.end(), flags.begin(), flags.end());
    a.insert(a.end(), {"--", "/usr/bin/python3", dir_ / "train.py", dir_ / "out"});
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }
  json Rank(int r) {
    std::ifstream in(dir_ / ("out/rank" + std::to_string(r) + ".json"));
    return json::parse(in, nullptr, false);
  }
  void NothingLeft(const json& e) {
    for (const auto& p : e["processes"])
      EXPECT_FALSE(testing::ProcessAlive(p["pid"].get<int>())) << p.dump();
  }
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(CommandE2E, RanksGetTorchrunsEnvironmentAndTheirArgumentsVerbatim) {
  const CommandResult r =
      daemon_->Cli(Submit({"--workers", "2", "--env", "TAG=blue"}, {"; rm -rf /", "$(id)", "a b"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  std::set<std::string> ports;
  for (int rank : {0, 1}) {
    const json seen = Rank(rank);
    ASSERT_TRUE(seen.is_object()) << rank;
    EXPECT_EQ(seen["RANK"], std::to_string(rank));
    EXPECT_EQ(seen["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(seen["WORLD_SIZE"], "2");
    EXPECT_EQ(seen["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(seen["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(seen["TAG"], "blue");
    EXPECT_TRUE(seen["LD_PRELOAD"].is_null());
    EXPECT_EQ(seen["argv"], json::array({"; rm -rf /", "$(id)", "a b"}));
    ports.insert(seen["MASTER_PORT"].get<std::string>());
  }
  EXPECT_EQ(ports.size(), 1u);  // one store for the run
  EXPECT_NE(*ports.begin(), "0");
  // Each rank's output is in the run's log, its lines prefixed; --worker picks one rank's.
  const std::string id = e["id"];
  const CommandResult all = daemon_->Cli({"logs", id});
  EXPECT_NE(all.out.find("[rank 0] hello from rank 0\n"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("[rank 1] and its stderr\n"), std::string::npos) << all.out;
  const CommandResult one = daemon_->Cli({"logs", id, "--worker", "1"});
  EXPECT_EQ(one.out, "hello from rank 1\nand its stderr\n");
  NothingLeft(e);
}

TEST_F(CommandE2E, ReportsBecomeTheFiguresAndChildrenAreMeasuredWithTheirRank) {
  const CommandResult r = daemon_->Cli(Submit({"--workers", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  const json& res = e["result"];
  EXPECT_EQ(res["steps"].get<uint64_t>(), 10u);     // 5 a rank
  EXPECT_EQ(res["samples"].get<uint64_t>(), 256u);  // 32 a step after each rank's first
  EXPECT_GT(res["samples_per_sec"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(res["first_loss"].get<double>(), 1.0);
  EXPECT_NEAR(res["last_loss"].get<double>(), 0.2, 1e-6);
  EXPECT_EQ(res["command"]["report_lines_ignored"].get<uint64_t>(), 2u);  // not JSON; 10 MB
  EXPECT_EQ(res["curve"].size(), 5u);  // rank 0's losses, every report (the curve has room)
  EXPECT_NEAR(res["forward_ms"].get<double>(), 2 * 4 * 2.0, 1e-6);  // as reported, in the window
  EXPECT_TRUE(res["backward_ms"].is_null());                        // not reported: absent, not 0
  // Two ranks of ~40 MB and their children of ~20 MB each: all in the sum.
  EXPECT_GT(res["peak_pss_sum_bytes"].get<double>(), 2 * (40 << 20) + 2 * (20 << 20));
  std::map<int, int> children;  // rank -> children seen
  int workers = 0;
  for (const auto& p : e["processes"]) {
    if (p["role"] == "worker") ++workers;
    if (p["role"] == "child") {
      ++children[p["index"].get<int>()];
      EXPECT_GT(p["peak_pss_bytes"].get<double>(), 10 << 20) << p.dump();
    }
  }
  EXPECT_EQ(workers, 2);
  EXPECT_EQ(children[0], 1);
  EXPECT_EQ(children[1], 1);
  const CommandResult get = daemon_->Cli({"get", e["id"]});
  EXPECT_NE(get.out.find("  command     /usr/bin/python3 "), std::string::npos) << get.out;
  EXPECT_NE(get.out.find("2 lines ignored"), std::string::npos) << get.out;
  NothingLeft(e);
}

TEST_F(CommandE2E, WithoutReportsTheTrainingFiguresAreAbsentNotZero) {
  std::ofstream(dir_ / "quiet.py") << "import time\ntime.sleep(0.5)\n";
  const CommandResult r = daemon_->Cli({"submit", "--kind", "command", "--workers", "2", "--wait",
                                        "--json", "--", "python3", dir_ / "quiet.py"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  for (const char* absent :
       {"samples_per_sec", "samples", "steps", "train_ms", "first_loss", "forward_ms"})
    EXPECT_TRUE(e["result"][absent].is_null()) << absent;
  EXPECT_GT(e["result"]["peak_pss_sum_bytes"].get<double>(), 0);
  EXPECT_EQ(e["result"]["command"]["report_lines_ignored"].get<uint64_t>(), 0u);
  // No profiler trace written: no folder kept, no field (absent, not an empty list).
  EXPECT_FALSE(e.contains("profile_dir") && !e["profile_dir"].get<std::string>().empty());
  EXPECT_FALSE(fs::exists(dir_ / ("state/profiles/" + e["id"].get<std::string>())));
}

TEST_F(CommandE2E, ARankThatFailsEndsTheRunNamingItAndLeavesNothing) {
  for (const std::string how : {"3", "kill"}) {
    const CommandResult r =
        daemon_->Cli(Submit({"--workers", "2", "--env", "FAIL=1:" + how, "--env", "STEPS=50"}));
    const json e = Parse(r);
    ASSERT_EQ(e["state"], "FAILED") << how << ": " << r.out;
    const std::string error = e["error"];
    EXPECT_NE(error.find("worker 1"), std::string::npos) << error;
    EXPECT_NE(error.find(how == "3" ? "code 3" : "signal 9"), std::string::npos) << error;
    EXPECT_TRUE(testing::WaitFor(
        [&] {
          for (const auto& p : e["processes"])
            if (testing::ProcessAlive(p["pid"].get<int>())) return false;
          return true;
        },
        10))
        << how;
  }
}

TEST_F(CommandE2E, WhatMustNotRunIsRefusedNamingWhy) {
  auto refused = [&](std::vector<std::string> args, const std::string& why) {
    const CommandResult r = daemon_->Cli(args);
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  };
  refused(Submit({"--env", "LD_PRELOAD=/tmp/x.so"}), "env: LD_PRELOAD is not yours to set");
  refused(Submit({"--env", "SHOAL_REPORT_FD=1"}), "env: SHOAL_REPORT_FD is not yours to set");
  refused(Submit({"--env", "RANK=3"}), "env: RANK is not yours to set");
  refused(Submit({"--start", "fork"}), "start: a command is spawned");
  refused(Submit({"--batch-size", "8"}), "batch_size: not a field of kind command");
  refused({"submit", "--kind", "command"}, "command: give the program each worker runs after --");
  refused({"submit", "--", "python3", "x.py"}, "kind hogwild runs no program of yours");
  // A daemon not started with --allow-commands runs none, whoever asks.
  Daemon plain(dir_ / "state2", dir_ / "s2.sock");
  ASSERT_TRUE(plain.Start());
  const CommandResult r = plain.Cli({"submit", "--kind", "command", "--", "python3", "x.py"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("started without --allow-commands"), std::string::npos) << r.err;
}

// A script written for torchrun runs unchanged: DistributedDataParallel over Gloo from env://,
// and both replicas end with the same weights.
TEST_F(CommandE2E, ATorchrunScriptTrainsDdpOverGlooUnchanged) {
  std::ofstream(dir_ / "ddp.py") << R"PY(
import os, sys, torch, torch.distributed as dist
import shoal_report
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(dist.get_rank())
# Profiled where Shoal says, one file a rank (HTA reads the set).
handler = torch.profiler.tensorboard_trace_handler(os.environ["SHOAL_PROFILE_DIR"],
                                                   worker_name="rank%d" % dist.get_rank())
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                            schedule=torch.profiler.schedule(wait=1, warmup=1, active=2),
                            on_trace_ready=handler) as prof:
    for step in range(5):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        shoal_report.step(samples=8, loss=loss.item())
        prof.step()
s = sum(float(p.double().sum()) for p in model.parameters())
open(os.path.join(sys.argv[1], "sum%d" % dist.get_rank()), "w").write(repr(s))
dist.destroy_process_group()
)PY";
  const CommandResult r =
      daemon_->Cli({"submit", "--kind", "command", "--workers", "2", "--wait", "--json", "--env",
                    "PYTHONPATH=" + std::string(SHOAL_SOURCE_DIR) + "/client/python", "--",
                    "/usr/bin/python3", dir_ / "ddp.py", dir_ / "out"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  EXPECT_EQ(e["result"]["steps"].get<uint64_t>(), 10u);
  std::string sums[2];
  for (int rank : {0, 1}) std::ifstream(dir_ / ("out/sum" + std::to_string(rank))) >> sums[rank];
  EXPECT_FALSE(sums[0].empty());
  EXPECT_EQ(sums[0], sums[1]);  // gradients were averaged: one model
  // Each rank's torch.profiler trace, gathered with the run in its own folder.
  ASSERT_EQ(e["profile_traces"].size(), 2u) << e.dump();
  const std::string folder = e["profile_dir"];
  EXPECT_EQ(folder, dir_.path() + "/state/profiles/" + e["id"].get<std::string>());
  for (int rank : {0, 1}) {
    const json& t = e["profile_traces"][rank];
    EXPECT_EQ(t["name"].get<std::string>().rfind("rank" + std::to_string(rank) + ".", 0), 0u);
    std::ifstream in(folder + "/" + t["name"].get<std::string>());
    const json trace = json::parse(in, nullptr, false);
    ASSERT_FALSE(trace.is_discarded()) << t;
    EXPECT_GT(t["size_bytes"].get<uint64_t>(), 1000u);
    // The legacy CPU profiler (Debian's 1.13) writes a bare array; Kineto an object.
    const json& events = trace.is_array() ? trace : trace["traceEvents"];
    EXPECT_GT(events.size(), 10u);
  }
  const CommandResult got = daemon_->Cli({"get", e["id"]});
  EXPECT_NE(got.out.find("  profiles    2 torch.profiler trace(s), "), std::string::npos)
      << got.out;
  ASSERT_EQ(daemon_->Cli({"rm", e["id"]}).exit_code, 0);
  EXPECT_FALSE(fs::exists(folder));  // gone with its record
}

// A sweep over worker counts and an environment variable: every point runs with its value, and
// the report has the study's tables for the program.
TEST_F(CommandE2E, ASweepVariesWorkersAndAnEnvironmentVariable) {
  const CommandResult r = daemon_->Cli(
      {"sweep", "--kind", "command", "--workers", "1,2", "--env", "TAG=red,green", "--env",
       "STEPS=2", "--env", "PYTHONPATH=" + std::string(SHOAL_SOURCE_DIR) + "/client/python",
       "--wait", "--json", "--", "/usr/bin/python3", dir_ / "train.py", dir_ / "out"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json report = Parse(r);
  ASSERT_EQ(report["sweep"]["points"].size(), 4u) << r.out;
  std::set<std::string> tags;
  for (const auto& [id, e] : report["experiments"].items()) {
    EXPECT_EQ(e["state"], "SUCCEEDED") << e["error"];
    for (const auto& kv : e["spec"]["command"]["env"])
      if (kv.get<std::string>().rfind("TAG=", 0) == 0) tags.insert(kv.get<std::string>());
  }
  EXPECT_EQ(tags, (std::set<std::string>{"TAG=red", "TAG=green"}));
  const CommandResult md = daemon_->Cli({"report", report["sweep"]["id"]});
  EXPECT_NE(md.out.find("| env.TAG | 1 | 2 |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("## Throughput (samples/s, all workers)"), std::string::npos) << md.out;
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// A program whose thread starts a child holding 20 MiB (its pid in OUT/thread_child), and which
// double-forks a setsid child holding 30 MiB (OUT/daemon_child), then sleeps SECONDS:
// `python3 PATH OUT SECONDS`.
void WriteEscapingProgram(const fs::path& path) {
  std::ofstream(path) << R"PY(
import os, sys, threading, subprocess, time
out = sys.argv[1]
hold = "b = bytearray(%d << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nimport time\ntime.sleep(120)"
started = threading.Event()
def start():  # the thread lives on: while it does, its child is its own, not the main thread's
    p = subprocess.Popen([sys.executable, "-c", hold % 20])
    open(os.path.join(out, "thread_child"), "w").write(str(p.pid))
    started.set()
    time.sleep(60)
threading.Thread(target=start, daemon=True).start()
started.wait()  # no fork while Popen waits on its pipe: the forked child would hold it open
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        open(os.path.join(out, "daemon_child"), "w").write(str(os.getpid()))
        exec(hold % 30)
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(float(sys.argv[2]))
)PY";
}

// The escaping program's child `file` (pid `pid`) in the run's record, a child holding at least
// `mib` - 5 MiB at its peak, and dead within 10 s.
void ExpectMeasuredAndEnded(const json& e, const char* file, int pid, int mib) {
  ASSERT_GT(pid, 0) << file;
  const json* found = nullptr;
  for (const auto& p : e["processes"])
    if (p["pid"] == pid) found = &p;
  ASSERT_NE(found, nullptr) << file << " (pid " << pid << ") not measured: " << e["processes"];
  EXPECT_EQ((*found)["role"], "child") << *found;
  EXPECT_GT((*found)["peak_pss_bytes"].get<double>(), (mib - 5) * 1048576.0) << *found;
  EXPECT_TRUE(testing::WaitFor([&] { return !testing::ProcessAlive(pid); }, 10))
      << file << " outlived its run";
}

// Every process a run starts is the run's (issue 58), however started: a child of a thread other
// than the rank's main one (no walk of the main thread's children finds it) and a daemonised
// grandchild (double fork and setsid: it leaves the process group and is orphaned) are measured
// while they live and ended with the run, through the run's own cgroup.
TEST(ContainmentE2E, ChildrenOfThreadsAndDaemonisedOnesAreMeasuredAndEndedWithTheRun) {
  testing::TempDir dir;
  WriteEscapingProgram(dir / "escape.py");
  fs::create_directories(dir / "out");
  Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start({"--allow-commands", "--grace-ms", "1000"}));
  const CommandResult r =
      d.Cli({"submit", "--kind", "command", "--workers", "1", "--sample-interval-ms", "100",
             "--wait", "--json", "--", "/usr/bin/python3", dir / "escape.py", dir / "out", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  EXPECT_EQ(e["containment"].get<std::string>().rfind("cgroup ", 0), 0u) << e["containment"];
  for (const auto& [file, mib] : {std::pair{"thread_child", 20}, std::pair{"daemon_child", 30}}) {
    int pid = 0;
    std::ifstream(dir / ("out/" + std::string(file))) >> pid;
    ExpectMeasuredAndEnded(e, file, pid, mib);
  }
  const std::string containment = e["containment"];
  const std::string group = containment.substr(7, containment.find(';') - 7);
  EXPECT_FALSE(fs::exists(group)) << group;  // removed once empty
  // The kernel's own figures of the group: at least both children's 50 MiB, no OOM kill.
  EXPECT_GT(e["result"]["cgroup_memory_peak_bytes"].get<double>(), 50.0 * 1048576) << e["result"];
  EXPECT_EQ(e["result"]["oom_kills"], 0);
}

// The same escapes, cancelled while they live: ended with the run, measured until then, with the
// run's cgroup and without one (--run-cgroups no, as where none can be made: every thread's
// children walked in /proc, the leader a subreaper that adopts what a double fork orphans, each
// such child signalled by pid).
class ContainmentModes : public ::testing::TestWithParam<const char*> {};

TEST_P(ContainmentModes, EscapedChildrenAreMeasuredAndEndedWhenTheRunIsCancelled) {
  const bool cgroup = std::string(GetParam()) == "yes";
  testing::TempDir dir;
  WriteEscapingProgram(dir / "escape.py");
  fs::create_directories(dir / "out");
  Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start({"--allow-commands", "--grace-ms", "1000", "--run-cgroups", GetParam()}));
  const CommandResult r =
      d.Cli({"submit", "--kind", "command", "--workers", "1", "--sample-interval-ms", "100",
             "--json", "--", "/usr/bin/python3", dir / "escape.py", dir / "out", "120"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const std::string id = Parse(r)["id"];
  std::map<std::string, int> pids;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        for (const char* file : {"thread_child", "daemon_child"})
          std::ifstream(dir / ("out/" + std::string(file))) >> pids[file];
        return pids["thread_child"] > 0 && pids["daemon_child"] > 0;
      },
      60));
  // Their memory touched and sampled: the live record shows each at its size (a loaded machine
  // may take seconds to start the Pythons and find them).
  auto sampled = [&](const json& live, int pid, int mib) {
    for (const auto& p : live.value("processes", json::array()))
      if (p["pid"] == pid && p.value("peak_pss_bytes", 0.0) > (mib - 5) * 1048576.0) return true;
    return false;
  };
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        const json live = Parse(d.Cli({"get", id, "--json"}));
        return sampled(live, pids["thread_child"], 20) && sampled(live, pids["daemon_child"], 30);
      },
      60))
      << d.Cli({"get", id, "--json"}).out;
  ASSERT_EQ(d.Cli({"cancel", id}).exit_code, 0);
  json e;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        e = Parse(d.Cli({"get", id, "--json"}));
        return e["state"] != "RUNNING";
      },
      60));
  EXPECT_EQ(e["state"], "CANCELLED") << e["error"];
  const std::string containment = e["containment"];
  EXPECT_EQ(containment.rfind(cgroup ? "cgroup " : "process group and /proc (--run-cgroups no)", 0),
            0u)
      << containment;
  for (const auto& [file, mib] : {std::pair{"thread_child", 20}, std::pair{"daemon_child", 30}})
    ExpectMeasuredAndEnded(e, file, pids[file], mib);
}

INSTANTIATE_TEST_SUITE_P(RunCgroups, ContainmentModes, ::testing::Values("yes", "no"));

// A run over shoald's --run-memory-limit-mib is taken by the kernel's OOM killer inside its own
// group; the run fails saying so from the kernel's count, not from any words of the program.
TEST(ContainmentE2E, AnOomKillInsideTheRunsMemoryLimitIsTheKernelsWord) {
  testing::TempDir dir;
  std::ofstream(dir / "grow.py") << R"PY(
import time
chunks = []
for _ in range(24):
    b = bytearray(25 << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    chunks.append(b)
    time.sleep(0.05)
time.sleep(2)
)PY";
  Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start({"--allow-commands", "--run-memory-limit-mib", "200"}));
  const CommandResult r = d.Cli({"submit", "--kind", "command", "--workers", "1", "--wait",
                                 "--json", "--", "/usr/bin/python3", dir / "grow.py"});
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "FAILED") << r.out << r.err;
  const std::string error = e["error"];
  EXPECT_NE(error.find("out of memory"), std::string::npos) << error;
  EXPECT_NE(error.find("the kernel's OOM killer killed 1 process(es) of this run (its cgroup's "
                       "count)"),
            std::string::npos)
      << error;
  EXPECT_EQ(e["result"]["oom_kills"].get<int>(), 1) << e["result"];
  const double peak = e["result"]["cgroup_memory_peak_bytes"].get<double>();
  EXPECT_GT(peak, 150.0 * 1048576) << e["result"];
  EXPECT_LE(peak, 200.0 * 1048576) << e["result"];  // the limit holds
}

}  // namespace
}  // namespace shoal
