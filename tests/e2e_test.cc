// End to end: the real shoald, real shoal-worker processes and the real CLI on a temporary unix
// socket and state directory, on the real Fashion-MNIST files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "shared/os/shm.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::TempDir;

using testing::kFashion;

class E2E : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start()) << "shoald did not start";
  }

  json MustJson(const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }

  // Nothing of the experiment is left: no live process, no segment.
  void ExpectNothingLeft(const json& e) {
    EXPECT_TRUE(ListSegments(SegmentPrefix(e["id"].get<std::string>())).empty());
    for (const auto& p : e["processes"]) {
      EXPECT_FALSE(p["alive"].get<bool>());
      EXPECT_FALSE(testing::ProcessAlive(p["pid"].get<int>()))
          << "pid " << p["pid"] << " still alive";
    }
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

struct Mode {
  const char* start;
  const char* share;
};

void PrintTo(const Mode& m, std::ostream* os) { *os << m.start << "/share=" << m.share; }

class HogwildE2E : public E2E, public ::testing::WithParamInterface<Mode> {};

// A process's CPU time (user + system, all threads) in ms, read here from /proc/<pid>/stat.
double CpuMs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)  // fields 14 and 15: utime, stime
    if (i >= 14) ticks += std::stod(field);
  return ticks * 1000.0 / double(sysconf(_SC_CLK_TCK));
}

TEST_P(HogwildE2E, TrainsOnRealDataAndSharingIsWhatItSays) {
  const Mode m = GetParam();
  const double daemon_cpu0 = CpuMs(daemon_->pid());
  const auto t0 = std::chrono::steady_clock::now();
  json e = MustJson(daemon_->Cli(
      {"submit", "--workers", "2",      "--start",        m.start, "--share",
       m.share,  "--device",  "cpu",    "--batches",      "3",     "--batch-size",
       "64",     "--dataset", kFashion, "--eval-samples", "64",    "--sample-interval-ms",
       "100",    "--wait",    "--json"}));
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double daemon_cpu_ms = CpuMs(daemon_->pid()) - daemon_cpu0;
  ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
  const json& r = e["result"];
  // The times against this test's stopwatch, which encloses the whole submit and wait; the
  // sampler's CPU against the daemon's own, read from /proc (two clock ticks of slack: utime and
  // stime are each truncated to whole ticks, in both readings).
  EXPECT_LT(r["queued_ms"].get<double>() + r["wall_ms"].get<double>(), elapsed_ms);
  EXPECT_LT(r["ready_ms"].get<double>(), r["wall_ms"].get<double>());
  EXPECT_GT(r["train_ms"].get<double>(), 0);
  EXPECT_LT(r["train_ms"].get<double>(), r["wall_ms"].get<double>());
  EXPECT_LE(r["sampler_cpu_ms"].get<double>(),
            daemon_cpu_ms + 2000.0 / double(sysconf(_SC_CLK_TCK)));
  EXPECT_EQ(r["steps"], 6);
  EXPECT_EQ(r["samples"], 6 * 64);
  EXPECT_GT(r["samples_per_sec"].get<double>(), 0);
  EXPECT_GT(r["ready_ms"].get<double>(), 0);
  EXPECT_GT(r["peak_pss_sum_bytes"].get<uint64_t>(), 100u << 20);
  EXPECT_LE(r["peak_pss_sum_bytes"].get<uint64_t>(), r["peak_rss_sum_bytes"].get<uint64_t>());
  EXPECT_LE(r["peak_uss_sum_bytes"].get<uint64_t>(), r["peak_pss_sum_bytes"].get<uint64_t>());
  EXPECT_GT(r["data_bytes"].get<uint64_t>(), 60000u * 784);  // the real training set, once
  EXPECT_FALSE(r["test_accuracy"].is_null());
  EXPECT_EQ(r["test_images"], 64);
  EXPECT_GT(r["smaps_reads"].get<uint64_t>(), 0u);
  EXPECT_GT(r["start_ms"].get<double>(), 0);
  EXPECT_LE(r["start_ms"].get<double>(), r["ready_ms"].get<double>());

  ASSERT_EQ(e["processes"].size(), 3u);
  std::set<std::string> sums;
  for (const auto& p : e["processes"]) {
    if (p["role"] == "leader") continue;
    EXPECT_EQ(p["steps"], 3);
    EXPECT_EQ(p["exit_code"], 0);
    EXPECT_GT(p["peak_rss_bytes"].get<uint64_t>(), 0u);  // VmHWM
    sums.insert(p["weights_checksum"].get<std::string>());
  }
  const std::string initial = r["initial_weights_checksum"],
                    final_shared = r["final_shared_checksum"];
  if (std::string(m.share) == "yes") {
    // Everyone trained the one copy: all workers end on the segment's weights, which moved.
    ASSERT_EQ(sums.size(), 1u);
    EXPECT_EQ(*sums.begin(), final_shared);
    EXPECT_NE(final_shared, initial);
  } else {
    // Each trained its own: two different results, and the leader's copy never changed.
    EXPECT_EQ(sums.size(), 2u);
    EXPECT_EQ(sums.count(initial), 0u);
    EXPECT_EQ(final_shared, initial);
  }
  ExpectNothingLeft(e);
}

INSTANTIATE_TEST_SUITE_P(StartAndShare, HogwildE2E,
                         ::testing::Values(Mode{"fork", "yes"}, Mode{"fork", "no"},
                                           Mode{"spawn", "yes"}, Mode{"spawn", "no"}),
                         [](const auto& info) {
                           return std::string(info.param.start) + "_share_" + info.param.share;
                         });

// Also the planned step memory end to end (the longest run here, so the one with most to replay).
// --activations lean trains the same weights, bit for bit, in a smaller step: conv1's 147 MB
// output is no longer held until backward (the peak moves into backward, where the gradient of
// that output is live: 406 MB -> 297 MB when this was written).
TEST_F(E2E, LeanActivationsTrainTheSameWeightsInASmallerStep) {
  std::map<std::string, json> runs;
  for (const std::string activations : {"pytorch", "lean"}) {
    runs[activations] = MustJson(daemon_->Cli(
        {"submit", "--workers", "1", "--batches", "4", "--dataset", kFashion, "--eval-samples", "0",
         "--allocator", "planned", "--activations", activations, "--wait", "--json"}));
    ASSERT_EQ(runs[activations]["state"], "SUCCEEDED") << runs[activations].dump(2);
  }
  auto worker = [](const json& e) {
    for (const auto& p : e["processes"])
      if (p["role"] == "worker") return p;
    return json();
  };
  const json a = worker(runs["pytorch"]), b = worker(runs["lean"]);
  EXPECT_EQ(a["weights_checksum"], b["weights_checksum"]);
  EXPECT_EQ(runs["pytorch"]["result"]["last_loss"], runs["lean"]["result"]["last_loss"]);
  const double live_a = a["step_memory"]["peak_live_bytes"],
               live_b = b["step_memory"]["peak_live_bytes"];
  EXPECT_GT(live_a - live_b, 100e6) << live_a << " " << live_b;
  EXPECT_NE(daemon_->Cli({"get", runs["lean"]["id"]}).out.find("activations lean"),
            std::string::npos);
}

// No flags: the planned allocator (saying it was the default, and why) and Shoal's kernels; each
// trains to the weights of the alternative a user may give (--allocator cache, --kernels libtorch),
// bit for bit.
TEST_F(E2E, TheDefaultsArePlannedAndShoalsKernelsAndTrainAsCacheAndLibTorchsDo) {
  const std::map<std::string, std::vector<std::string>> given = {
      {"default", {}},
      {"cache", {"--allocator", "cache"}},
      {"libtorch", {"--kernels", "libtorch"}}};
  std::map<std::string, json> runs;
  for (const auto& [name, flags] : given) {
    std::vector<std::string> args = {
        "submit", "--workers",      "1", "--batches", "4",     "--batch-size", "16", "--dataset",
        kFashion, "--eval-samples", "0", "--wait",    "--json"};
    args.insert(args.end(), flags.begin(), flags.end());
    runs[name] = MustJson(daemon_->Cli(args));
    ASSERT_EQ(runs[name]["state"], "SUCCEEDED") << runs[name].dump(2);
  }
  const json& planned = runs["default"];
  EXPECT_EQ(planned["spec"]["allocator"], "planned");
  EXPECT_EQ(planned["spec"]["allocator_why"].get<std::string>().rfind("default: hogwild marks", 0),
            0u);
  EXPECT_EQ(runs["cache"]["spec"]["allocator_why"], "");
  EXPECT_EQ(planned["spec"]["kernels"], "shoal");
  EXPECT_EQ(runs["libtorch"]["spec"]["kernels"], "libtorch");
  auto worker = [](const json& e) {
    for (const auto& p : e["processes"])
      if (p["role"] == "worker") return p;
    return json();
  };
  for (const std::string other : {"cache", "libtorch"}) {
    EXPECT_EQ(worker(planned)["weights_checksum"], worker(runs[other])["weights_checksum"])
        << other;
    EXPECT_EQ(planned["result"]["last_loss"], runs[other]["result"]["last_loss"]) << other;
  }
  EXPECT_EQ(worker(planned)["step_memory"]["replayed_steps"], 3);
  EXPECT_EQ(worker(planned)["step_memory"]["fallback_steps"], 0);
  const CommandResult get = daemon_->Cli({"get", planned["id"]});
  EXPECT_NE(get.out.find("  allocator   planned (default: hogwild marks its steps on the CPU)"),
            std::string::npos)
      << get.out;
  EXPECT_EQ(get.out.find("kernels"), std::string::npos) << get.out;  // the default is not shown
  const CommandResult libtorch = daemon_->Cli({"get", runs["libtorch"]["id"]});
  EXPECT_NE(libtorch.out.find(", kernels libtorch\n"), std::string::npos) << libtorch.out;
}

// Workers taking turns at their steps (fewer concurrent steps than workers) run them in arenas
// they share, the first worker's traced plan adopted by the others, and train every worker's
// own weights (share no: no worker sees another's updates) bit for bit as when all step at once;
// each says how long it waited, and the arenas' segment is gone afterwards.
TEST_F(E2E, WorkersTakingTurnsShareStepArenasAndTrainTheSameWeights) {
  std::map<std::string, json> runs;
  for (const std::string steps : {"2", "3"}) {
    runs[steps] = MustJson(
        daemon_->Cli({"submit", "--workers", "3", "--start", "spawn", "--share", "no", "--batches",
                      "3", "--batch-size", "16", "--dataset", kFashion, "--eval-samples", "0",
                      "--concurrent-steps", steps, "--wait", "--json"}));
    ASSERT_EQ(runs[steps]["state"], "SUCCEEDED") << runs[steps].dump(2);
  }
  std::map<int, json> turns, together;
  for (const auto& p : runs["2"]["processes"])
    if (p["role"] == "worker") turns[p["index"].get<int>()] = p;
  for (const auto& p : runs["3"]["processes"])
    if (p["role"] == "worker") together[p["index"].get<int>()] = p;
  ASSERT_EQ(turns.size(), 3u);
  int adopted = 0;
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(turns[i]["weights_checksum"], together[i]["weights_checksum"]);
    EXPECT_EQ(turns[i]["step_memory"]["shared_arenas"], 2);
    EXPECT_EQ(turns[i]["step_memory"]["fallback_steps"], 0);
    EXPECT_GE(turns[i]["step_wait_ms"].get<double>(), 0.0);
    adopted += turns[i]["step_memory"]["replayed_steps"] == 3 ? 1 : 0;  // no traced step
    EXPECT_EQ(together[i]["step_memory"]["shared_arenas"], 0);          // an arena of its own
    EXPECT_EQ(together[i]["step_wait_ms"], nullptr);                    // absent: no turns taken
  }
  EXPECT_EQ(adopted, 2);  // one worker traced, the other two took its plan
  EXPECT_EQ(runs["2"]["spec"]["hogwild"]["concurrent_steps_why"], "");  // given: no reason
  for (const auto& [steps, e] : runs) ExpectNothingLeft(e);
  const CommandResult get = daemon_->Cli({"get", runs["2"]["id"]});
  EXPECT_NE(get.out.find("  steps       2 of 3 workers at once (given)"), std::string::npos)
      << get.out;
}

// Under spawn and the forkserver the leader is shoal-leader: it never loads LibTorch (its maps,
// read while it runs, hold no libtorch), so worker 0 builds the initial weights; they are the
// ones a fork leader builds (same seed, same checksum), and one worker trains them to the same
// final weights.
TEST_F(E2E, UnderSpawnAndTheForkServerTheLeaderLoadsNoLibTorch) {
  std::map<std::string, json> runs;
  std::map<std::string, bool> maps_libtorch;
  for (const std::string start : {"fork", "spawn", "forkserver"}) {
    const std::string id =
        MustJson(daemon_->Cli({"submit", "--start", start, "--workers", "1", "--threads", "1",
                               "--batches", "10", "--batch-size", "16", "--dataset", kFashion,
                               "--eval-samples", "0", "--seed", "5", "--json"}))["id"];
    pid_t leader = -1;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          const json e = testing::Parse(daemon_->Cli({"get", id, "--json"}));
          for (const auto& p : e["processes"])
            if (p["role"] == "leader") leader = p["pid"].get<int>();
          return leader > 0 || e["state"] == "SUCCEEDED" || e["state"] == "FAILED";
        },
        60));
    std::ifstream in("/proc/" + std::to_string(leader) + "/maps");
    const std::string maps((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_NE(maps.find("[stack]"), std::string::npos) << start << ": leader gone before read";
    maps_libtorch[start] = maps.find("libtorch") != std::string::npos;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          runs[start] = testing::Parse(daemon_->Cli({"get", id, "--json"}));
          return runs[start]["state"] != "RUNNING" && runs[start]["state"] != "QUEUED";
        },
        120));
    ASSERT_EQ(runs[start]["state"], "SUCCEEDED") << runs[start].dump(2);
  }
  EXPECT_TRUE(maps_libtorch["fork"]);
  EXPECT_EQ(runs["fork"]["result"]["leader_program"], "shoal-worker");
  for (const std::string start : {"spawn", "forkserver"}) {
    EXPECT_FALSE(maps_libtorch[start]) << start;
    const json& r = runs[start]["result"];
    EXPECT_EQ(r["leader_program"], "shoal-leader") << start;
    EXPECT_EQ(r["leader_why"], "start " + start + ": worker 0 writes the initial weights");
    EXPECT_EQ(r["initial_weights_checksum"], runs["fork"]["result"]["initial_weights_checksum"]);
    EXPECT_EQ(r["final_shared_checksum"], runs["fork"]["result"]["final_shared_checksum"]);
    EXPECT_EQ(r["last_loss"], runs["fork"]["result"]["last_loss"]);
    EXPECT_EQ(r["weights_bytes"], runs["fork"]["result"]["weights_bytes"]);
  }
  const CommandResult get = daemon_->Cli({"get", runs["spawn"]["id"]});
  EXPECT_NE(get.out.find("  leader      shoal-leader, peak PSS "), std::string::npos) << get.out;
}

// --eval-samples asks for at most that many test images: the accuracy says over how many it was
// taken (the synthetic set has 1000).
TEST_F(E2E, AccuracyIsOverTheImagesEvaluated) {
  json e = MustJson(daemon_->Cli({"submit", "--batches", "1", "--dataset", "synthetic",
                                  "--eval-samples", "5000", "--wait", "--json"}));
  ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
  EXPECT_EQ(e["result"]["test_images"], 1000);
  const CommandResult get = daemon_->Cli({"get", e["id"]});
  EXPECT_NE(get.out.find(" on 1000 images ("), std::string::npos) << get.out;
}

// A record says where it ran: this machine, as the OS tells it here (not as shoald read it), and
// `get` prints it.
TEST_F(E2E, ARecordSaysWhereItRan) {
  json e = MustJson(daemon_->Cli({"submit", "--batches", "1", "--dataset", "synthetic",
                                  "--eval-samples", "0", "--wait", "--json"}));
  ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
  ASSERT_TRUE(e.contains("host")) << e.dump(2);
  const json& h = e["host"];
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  EXPECT_EQ(h["hostname"], name);
  EXPECT_EQ(h["cores"].get<long>(), ::sysconf(_SC_NPROCESSORS_ONLN));
  utsname u{};
  ::uname(&u);
  EXPECT_EQ(h["kernel"], u.release);
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  meminfo >> key >> kb;  // "MemTotal: N kB"
  EXPECT_EQ(key, "MemTotal:");
  EXPECT_EQ(h["memory_bytes"].get<uint64_t>(), kb * 1024);
  EXPECT_EQ(h["libtorch"].get<std::string>().rfind("1.13", 0), 0u) << h.dump();
  EXPECT_FALSE(h["shoal"].get<std::string>().empty());
  const CommandResult get = daemon_->Cli({"get", e["id"]});
  EXPECT_NE(get.out.find("  host        " + std::string(name) + ": "), std::string::npos)
      << get.out;
}

// An epoch larger than the data set is refused once the leader has read the set, with both
// sizes; it is never cut to the set, and nothing is left behind.
TEST_F(E2E, AnEpochLargerThanTheSetFailsNamingBothSizes) {
  const CommandResult r = daemon_->Cli({"submit", "--epochs", "1", "--epoch-samples", "99999999",
                                        "--dataset", "synthetic", "--wait", "--json"});
  EXPECT_EQ(r.exit_code, 1);  // --wait: the experiment did not succeed
  json e = testing::Parse(r);
  EXPECT_EQ(e["state"], "FAILED") << e.dump(2);
  const std::string error = e["error"];
  EXPECT_NE(error.find("epoch_samples: 99999999 is more than the "), std::string::npos) << error;
  EXPECT_NE(error.find(" training images of synthetic"), std::string::npos) << error;
  ExpectNothingLeft(e);
}

TEST_F(E2E, LossDecreasesOverALongerRun) {
  json e = MustJson(
      daemon_->Cli({"submit", "--workers", "1", "--start", "fork", "--share", "yes", "--batches",
                    "50", "--batch-size", "32", "--dataset", kFashion, "--eval-samples", "500",
                    "--allocator", "planned", "--wait", "--json"}));
  ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
  const double first = e["result"]["first_loss"], last = e["result"]["last_loss"];
  EXPECT_GT(first, 2.0);  // ten classes, untrained: ~ln(10)
  EXPECT_LT(last, first * 0.85) << "first " << first << " last " << last;
  EXPECT_GT(e["result"]["test_accuracy"].get<double>(), 0.3);  // chance is 0.1
  const json* m = nullptr;
  for (const auto& p : e["processes"])
    if (p["role"] == "worker") m = &p["step_memory"];
  ASSERT_NE(m, nullptr);
  ASSERT_TRUE(m->is_object()) << e.dump(2);
  // conv1's output alone is 73.5 MB at batch 32; the arena packs the step's live peak closely.
  const double arena = (*m)["arena_bytes"].get<double>(), live = (*m)["peak_live_bytes"];
  EXPECT_GT(live, 73e6);
  EXPECT_GE(arena, live);
  EXPECT_LT(arena, 1.25 * live);
  EXPECT_EQ((*m)["replayed_steps"], 49);  // all but the traced first
  EXPECT_EQ((*m)["fallback_steps"], 0);
  EXPECT_LT((*m)["faults_per_step"].get<double>(), 1000);  // glibc: ~100 000 a step here
  CommandResult text = daemon_->Cli({"get", e["id"]});
  EXPECT_NE(text.out.find("step memory worker 0: arena"), std::string::npos) << text.out;
  ExpectNothingLeft(e);
}

TEST_F(E2E, BadSpecIsRefusedWithAMessageAndNothingStarts) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--workers", "1000"}, "workers: 1000 is outside the allowed range 1..64"},
      {{"--start", "vfork"}, "start: 'vfork' is not one of: fork, spawn, forkserver"},
      {{"--dataset", "/tmp"}, "dataset: '/tmp' is outside the data roots"},
      {{"--workers", "64", "--batch-size", "4096"}, "does not fit: needs ~"},
      {{"--stall-timeout-ms", "10"},
       "stall_timeout_ms: 10 is outside the allowed range 500..3600000"},
      {{"--dataset", "/nonexistent"}, "dataset: '/nonexistent' is not a directory"},
      {{"--batch-size", "100000"}, "batch_size: 100000 is outside the allowed range"},
      {{"--device", "cuda", "--start", "spawn"}, "device cuda: "},
      {{"--device", "cuda"}, "device: cuda with start fork and shared weights is impossible"},
      {{"--device", "cuda", "--kind", "multi_model"}, "device: kind multi_model does not train"},
      {{"--cuda-sync", "step"}, "cuda_sync: only with device cuda (device is cpu)"},
      {{"--cuda-sync", "never", "--device", "cuda", "--start", "spawn"},
       "cuda_sync: 'never' is not one of: events, phases, step"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"submit"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    CommandResult r = daemon_->Cli(args);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
  json l = MustJson(daemon_->Cli({"list", "--json"}));
  EXPECT_TRUE(l["experiments"].empty());
  CommandResult g = daemon_->Cli({"get", "nope"});
  EXPECT_NE(g.exit_code, 0);
  EXPECT_NE(g.err.find("id: 'nope' is not an id"), std::string::npos) << g.err;
  g = daemon_->Cli({"get", "x0123456789"});
  EXPECT_NE(g.exit_code, 0);
  EXPECT_NE(g.err.find("no experiment with id 'x0123456789'"), std::string::npos) << g.err;
}

TEST_F(E2E, WatchStreamsAndARestartedDaemonStillListsTheRun) {
  CommandResult s =
      daemon_->Cli({"submit", "--workers", "2", "--batches", "4", "--batch-size", "16", "--dataset",
                    "synthetic", "--sample-interval-ms", "50", "--json"});
  const std::string id = MustJson(s)["id"];
  CommandResult w = daemon_->Cli({"watch", id, "--json"});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  int samples = 0;
  std::string last_state;
  std::istringstream lines(w.out);
  for (std::string line; std::getline(lines, line);) {
    json ev = json::parse(line);
    EXPECT_EQ(ev["experiment_id"], id);
    if (ev.contains("sample")) {
      ++samples;
      EXPECT_LE(ev["sample"]["total_pss_bytes"].get<uint64_t>(),
                ev["sample"]["total_rss_bytes"].get<uint64_t>());
    }
    if (ev.contains("state")) last_state = ev["state"];
  }
  EXPECT_GT(samples, 2);
  EXPECT_EQ(last_state, "SUCCEEDED");

  daemon_->Stop(SIGTERM);
  Daemon again(dir_ / "state", dir_ / "s.sock");
  ASSERT_TRUE(again.Start());
  json l = MustJson(again.Cli({"list", "--json"}));
  ASSERT_EQ(l["experiments"].size(), 1u);
  EXPECT_EQ(l["experiments"][0]["id"], id);
  EXPECT_EQ(l["experiments"][0]["state"], "SUCCEEDED");
  json g = MustJson(again.Cli({"get", id, "--json"}));
  EXPECT_EQ(g["result"]["steps"], 8);
}

TEST_F(E2E, CancelStopsEveryProcessAndRemovesSegments) {
  const std::string id = MustJson(daemon_->Cli({"submit", "--workers", "2", "--batches", "100000",
                                                "--dataset", "synthetic", "--json"}))["id"];
  // Wait until both workers have taken steps.
  json e;
  for (int i = 0; i < 600; ++i) {
    e = MustJson(daemon_->Cli({"get", id, "--json"}));
    int stepped = 0;
    for (const auto& p : e["processes"]) stepped += p["steps"].get<int>() >= 2;
    if (e["state"] == "RUNNING" && stepped == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(e["processes"].size(), 3u) << e.dump(2);
  EXPECT_FALSE(ListSegments(SegmentPrefix(id)).empty());
  // While it runs, what is known only at the end is absent (null), never 0; when it started is
  // known.
  for (const char* f : {"samples", "steps", "shared_bytes", "sampler_cpu_ms", "eval_ms"})
    EXPECT_TRUE(e["result"][f].is_null()) << f << ": " << e["result"][f];
  EXPECT_TRUE(e["result"]["queued_ms"].is_number());
  // One cancelled while queued never started: no queued_ms (submit -> start), no figures.
  const std::string queued = MustJson(
      daemon_->Cli({"submit", "--batches", "1", "--dataset", "synthetic", "--json"}))["id"];
  const json q = MustJson(daemon_->Cli({"cancel", queued, "--json"}));
  EXPECT_EQ(q["state"], "CANCELLED");
  for (const char* f : {"queued_ms", "samples", "steps", "threads"})
    EXPECT_TRUE(q["result"][f].is_null()) << f << ": " << q["result"][f];
  EXPECT_NE(daemon_->Cli({"get", queued}).out.find("queued_ms -\n"), std::string::npos);
  MustJson(daemon_->Cli({"cancel", id, "--json"}));
  for (int i = 0; i < 300; ++i) {
    e = MustJson(daemon_->Cli({"get", id, "--json"}));
    if (e["state"] != "RUNNING") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(e["state"], "CANCELLED");
  ExpectNothingLeft(e);
  // What it did, over the time it trained (not over microseconds), and how its workers really
  // ended: killed, or unknown when nobody saw it, never a clean "code 0".
  const double sps = e["result"]["samples_per_sec"].get<double>();
  EXPECT_GT(sps, 1.0);
  EXPECT_LT(sps, 5000.0);
  EXPECT_GE(e["result"]["steps"].get<int>(), 4);
  EXPECT_TRUE(e["result"]["eval_ms"].is_null());  // cancelled before its evaluation
  for (const auto& p : e["processes"]) {
    if (p["role"] != "worker") continue;
    EXPECT_FALSE(p["exit_known"].get<bool>() && p["signal"] == 0 && p["exit_code"] == 0)
        << p.dump();
  }
  // Idempotent.
  json again = MustJson(daemon_->Cli({"cancel", id, "--json"}));
  EXPECT_EQ(again["state"], "CANCELLED");
}

// rm refuses what is running and deletes what ended (a sweep with its points); prune keeps the
// newest; the CLI follows listing pages.
TEST_F(E2E, RmAndPruneDeleteEndedRecordsOnly) {
  const std::string running = MustJson(
      daemon_->Cli({"submit", "--batches", "100000", "--dataset", "synthetic", "--json"}))["id"];
  auto rm = daemon_->Cli({"rm", running});
  EXPECT_NE(rm.exit_code, 0);
  EXPECT_NE(rm.err.find("cancel it first"), std::string::npos) << rm.err;
  MustJson(daemon_->Cli({"cancel", running, "--json"}));
  std::vector<std::string> ended;
  for (int i = 0; i < 3; ++i) {
    json e = MustJson(daemon_->Cli({"submit", "--batches", "1", "--batch-size", "16", "--dataset",
                                    "synthetic", "--eval-samples", "0", "--wait", "--json"}));
    ended.push_back(e["id"]);
  }
  const json sweep =
      MustJson(daemon_->Cli({"sweep", "--batch-size", "16,32", "--batches", "1", "--dataset",
                             "synthetic", "--eval-samples", "0", "--wait", "--json"}));
  const std::string sweep_id = sweep["sweep"]["id"];
  json all = MustJson(daemon_->Cli({"list", "--json", "--page-size", "1"}));
  EXPECT_EQ(all["experiments"].size(), 6u);  // followed six pages
  // A point goes with its sweep only.
  const std::string point = sweep["sweep"]["points"][0]["experiment_id"];
  auto rm_point = daemon_->Cli({"rm", point});
  EXPECT_NE(rm_point.err.find("delete the sweep"), std::string::npos) << rm_point.err;
  // An id given twice is refused before anything is deleted.
  auto twice = daemon_->Cli({"rm", sweep_id, running, sweep_id});
  EXPECT_NE(twice.err.find("rm: " + sweep_id + " given twice"), std::string::npos) << twice.err;
  EXPECT_EQ(daemon_->Cli({"get", sweep_id}).exit_code, 0);
  auto rm_sweep = daemon_->Cli({"rm", sweep_id, running});
  EXPECT_EQ(rm_sweep.exit_code, 0) << rm_sweep.err;
  EXPECT_NE(rm_sweep.out.find("(2 experiments)"), std::string::npos) << rm_sweep.out;
  EXPECT_NE(daemon_->Cli({"get", point}).exit_code, 0);
  EXPECT_NE(daemon_->Cli({"get", running}).exit_code, 0);
  EXPECT_EQ(MustJson(daemon_->Cli({"sweeps", "--json"}))["sweeps"].size(), 0u);
  // Prune all but the newest.
  EXPECT_NE(daemon_->Cli({"prune"}).exit_code, 0);
  EXPECT_NE(daemon_->Cli({"prune", "--older-than", "30 days"}).exit_code, 0);
  // An empty age, one that would wrap to a few hours, and an octal-looking count are refused
  // naming the option, and delete nothing (the --keep 1 below still finds every record).
  for (std::vector<std::string> bad : {std::vector<std::string>{"--older-than", ""},
                                       {"--keep", "1", "--older-than", ""},
                                       {"--older-than", "213503982335d"},
                                       {"--keep", "010"}}) {
    bad.insert(bad.begin(), "prune");
    auto r = daemon_->Cli(bad);
    EXPECT_NE(r.exit_code, 0) << bad[1];
    EXPECT_TRUE(r.err.find("--older-than") != std::string::npos ||
                r.err.find("--keep") != std::string::npos ||
                r.err.find("duration") != std::string::npos)
        << r.err;
  }
  auto pruned = daemon_->Cli({"prune", "--keep", "1"});
  EXPECT_EQ(pruned.exit_code, 0) << pruned.err;
  all = MustJson(daemon_->Cli({"list", "--json"}));
  ASSERT_EQ(all["experiments"].size(), 1u);
  EXPECT_EQ(all["experiments"][0]["id"], ended.back());
  EXPECT_EQ(daemon_->Cli({"prune", "--older-than", "0s"}).exit_code, 0);
  EXPECT_EQ(MustJson(daemon_->Cli({"list", "--json"})).value("experiments", json::array()).size(),
            0u);
}

// What shoald refuses to start on, each in one line naming it; and what it must not touch: a
// file at the socket's path that is not a socket, the mode of a state dir it did not create.
TEST_F(E2E, ADaemonRefusesWhatItCannotOwnAndTouchesNothingElse) {
  auto shoald = [&](const std::string& state, const std::string& socket) {
    return testing::RunCommand(
        {testing::BinDir() + "/shoald", "--state-dir", state, "--socket", socket});
  };
  // The running daemon holds its state dir, lock file or not.
  std::filesystem::remove(dir_ / "state/shoald.lock");
  CommandResult second = shoald(dir_ / "state", dir_ / "other.sock");
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE((second.out + second.err).find("another shoald uses state dir"), std::string::npos)
      << second.out;
  // A regular file where the socket would go stays.
  const std::string file = dir_ / "notes.txt";
  std::ofstream(file) << "mine";
  std::filesystem::create_directories(dir_ / "shared");
  std::filesystem::permissions(dir_ / "shared", std::filesystem::perms::all);
  CommandResult clash = shoald(dir_ / "shared", file);
  EXPECT_NE(clash.exit_code, 0);
  EXPECT_NE(
      (clash.out + clash.err).find("something that is not a socket is there; not removing it"),
      std::string::npos)
      << clash.out;
  EXPECT_TRUE(std::filesystem::is_regular_file(file));
  EXPECT_EQ(std::filesystem::status(dir_ / "shared").permissions(), std::filesystem::perms::all);
  // A state dir too long for the forkserver's socket path.
  CommandResult deep = shoald(dir_ / std::string(120, 'd'), dir_ / "deep.sock");
  EXPECT_NE((deep.out + deep.err).find("is too long for the forkserver's socket"),
            std::string::npos)
      << deep.out;
}

TEST_F(E2E, NodeReportsNoGpuCleanly) {
  json n = MustJson(daemon_->Cli({"node", "--json"}));
  EXPECT_GT(n["cores"].get<int>(), 0);
  EXPECT_GT(n["shm_free_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(n["versions"]["libtorch"].get<std::string>().empty());
  // Either GPUs with their names, or none and why: never an empty answer.
  if (n["gpus"].empty()) {
    EXPECT_NE(n["gpu_status"].get<std::string>().find("no GPU"), std::string::npos);
  } else {
    EXPECT_FALSE(n["gpus"][0]["name"].get<std::string>().empty());
  }
}

// Users type the connection flags where they type the rest: after the command's name, they reach
// the same daemon as before it (and a socket that is not there is still the one tried).
TEST_F(E2E, ConnectionFlagsGoBeforeOrAfterTheCommand) {
  const std::string shoal = testing::BinDir() + "/shoal";
  json before =
      MustJson(testing::RunCommand({shoal, "--socket", daemon_->socket(), "node", "--json"}));
  json after =
      MustJson(testing::RunCommand({shoal, "node", "--json", "--socket", daemon_->socket()}));
  EXPECT_EQ(after["cores"], before["cores"]);
  CommandResult r = testing::RunCommand({shoal, "list", "--socket", dir_ / "none.sock"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("none.sock"), std::string::npos) << r.err;
}

// An option that cannot apply where it was typed is refused, naming it, rather than ignored:
// each of these once printed or did something else without a word.
TEST_F(E2E, OptionsThatDoNotApplyAreRefusedNotIgnored) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"get", "x0123456789", "--format", "csv"}, "--format goes with --samples"},
      {{"get", "x0123456789", "-o", dir_ / "out"}, "--output goes with --samples"},
      {{"get", "x0123456789", "--samples", "-o", ""}, "--output: needs a file name"},
      {{"report", "s0123456789", "--plot", "loss"}, "--plot chooses what svg and png draw"},
      {{"report", "s0123456789", "-o", ""}, "--output: needs a file name"},
      {{"get", "x0123456789", "--samples", "--json"}, "--json with --samples: use --format json"},
      {{"report", "s0123456789", "s0123456788", "--compare", "--plot", "loss"},
       "--compare prints Markdown"},
      {{"list", "--insecure"}, "--insecure needs --target"},
      {{"list", "--token-file", dir_ / "t"}, "--token-file needs --target"},
      {{"list", "--target", ""}, "--target: empty"},
      {{"sweep", "--workers", "1,,2"}, "workers: an empty value in the list '1,,2'"},
  };
  for (const auto& [args, why] : cases) {
    const CommandResult r = daemon_->Cli(args);
    EXPECT_NE(r.exit_code, 0) << args[0] << " " << why;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "out"));
  EXPECT_TRUE(MustJson(daemon_->Cli({"sweeps", "--json"})).value("sweeps", json::array()).empty());
  // The connection's options, typed without the test's --socket.
  std::ofstream(dir_ / "t") << "token\n";
  const std::string shoal = testing::BinDir() + "/shoal", t = dir_ / "t";
  const std::vector<std::pair<std::vector<std::string>, std::string>> connection = {
      {{"--target", "192.0.2.1:7443", "--insecure", "--token-file", t, "list"},
       "--insecure: 192.0.2.1:7443 is not a loopback address"},
      {{"--target", "127.0.0.1:1", "--insecure", "--tls-ca", t, "--token-file", t, "list"},
       "--tls-ca with --insecure"},
      {{"--target", "127.0.0.1:1", "--socket", daemon_->socket(), "--token-file", t, "list"},
       "--socket is for the unix socket, not --target"},
      {{"--socket", daemon_->socket(), "--socket-owner", "01000", "list"},
       "'01000' is not a whole number"},
      {{"--socket", daemon_->socket(), "list", "--page-size", "0x10"},
       "'0x10' is not a whole number"},
  };
  for (auto [args, why] : connection) {
    args.insert(args.begin(), shoal);
    const CommandResult r = testing::RunCommand(args);
    EXPECT_NE(r.exit_code, 0) << why;
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
}

// shoald refuses a flag that could not apply, or a number it would read otherwise than typed.
TEST_F(E2E, ADaemonRefusesFlagsItWouldIgnoreOrMisread) {
  std::ofstream(dir_ / "f") << "x\n";
  const std::string f = dir_ / "f";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--config", ""}, "--config: empty"},
      {{"--insecure"}, "--insecure needs --listen"},
      {{"--tls-client-ca", f}, "--tls-client-ca needs --listen"},
      {{"--max-workers", "010"}, "'010' is not a whole number"},
      {{"--grace-ms", "0x100"}, "'0x100' is not a whole number"},
      {{"--sampler-budget", " 0.01"}, "' 0.01' is not a plain decimal number"},
  };
  for (auto [args, why] : cases) {
    args.insert(args.begin(), {testing::BinDir() + "/shoald", "--state-dir", dir_ / "other",
                               "--socket", dir_ / "other.sock"});
    const CommandResult r = testing::RunCommand(args);
    EXPECT_NE(r.exit_code, 0) << why;
    EXPECT_NE((r.out + r.err).find(why), std::string::npos) << r.out << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "other.sock"));
}

// The default socket may sit outside --state-dir (the default state directory's, so that the CLI
// finds it): a directory shoald makes for it is as private as the state directory.
TEST(SocketE2E, ADirectoryMadeForTheSocketIsTheUsersAlone) {
  TempDir dir;
  Daemon d(dir / "state", dir / "run/shoal/s.sock");
  ASSERT_TRUE(d.Start());
  EXPECT_EQ(std::filesystem::status(dir / "run/shoal").permissions(),
            std::filesystem::perms::owner_all);
  EXPECT_EQ(d.Cli({"list"}).exit_code, 0);
}

TEST_F(E2E, CliWithoutDaemonSaysSoInOneLine) {
  CommandResult r =
      testing::RunCommand({testing::BinDir() + "/shoal", "--socket", dir_ / "none.sock", "list"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("cannot reach shoald"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// Whoever starts shoald may have OMP_*, MALLOC_* or LD_PRELOAD set: none of it reaches the
// experiment's processes, and what did is recorded with the experiment (NVIDIA_TF32_OVERRIDE, a
// GPU run's numerics, is passed).
TEST(CleanEnvironmentE2E, WorkersGetOnlyThePassedVariables) {
  testing::TempDir dir;
  ::setenv("OMP_NUM_THREADS", "7", 1);
  ::setenv("MALLOC_ARENA_MAX", "1", 1);
  ::setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
  testing::Daemon daemon(dir / "state", dir / "s.sock");
  const bool started = daemon.Start();
  ::unsetenv("OMP_NUM_THREADS");
  ::unsetenv("MALLOC_ARENA_MAX");
  ::unsetenv("NVIDIA_TF32_OVERRIDE");
  ASSERT_TRUE(started);
  const std::string id = testing::Parse(
      daemon.Cli({"submit", "--batches", "100000", "--dataset", "synthetic", "--json"}))["id"];
  nlohmann::json e;
  pid_t leader = -1;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        e = testing::Parse(daemon.Cli({"get", id, "--json"}));
        for (const auto& p : e["processes"])
          if (p["role"] == "leader") leader = p["pid"].get<int>();
        return leader > 0 && e["environment"].contains("PATH");
      },
      30));
  std::ifstream in("/proc/" + std::to_string(leader) + "/environ");
  std::string environ((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(environ.find("PATH="), std::string::npos);
  EXPECT_EQ(environ.find("OMP_NUM_THREADS"), std::string::npos);
  EXPECT_EQ(environ.find("MALLOC_ARENA_MAX"), std::string::npos);
  EXPECT_FALSE(e["environment"].contains("OMP_NUM_THREADS"));
  EXPECT_NE(environ.find("NVIDIA_TF32_OVERRIDE=0"), std::string::npos);
  EXPECT_EQ(e["environment"].value("NVIDIA_TF32_OVERRIDE", ""), "0");
  daemon.Cli({"cancel", id});
}

}  // namespace
}  // namespace shoal
