// pipeline end to end (seed 004): a real shoald runs AmoebaNet-D as stage processes exchanging
// activations and gradients through shared-memory rings; every stage's memory is accounted the
// seed's way, the parameters add up to the model's, and a killed stage fails the run with its
// reason and leaves nothing behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "shared/kinds/pipeline/amoebanet.h"
#include "shared/os/procfs.h"
#include "shared/os/shm.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::TempDir;
using testing::WaitFor;

using testing::Parse;

class PipelineE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start({"--grace-ms", "1000"}));
  }
  json Submit(std::vector<std::string> args, bool wait) {
    args.insert(args.begin(), {"submit", "--kind", "pipeline", "--layers", "6", "--filters", "16",
                               "--batch-size", "4", "--json"});
    if (wait) args.push_back("--wait");
    CommandResult r = daemon_->Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Parse(r);
  }
  json Get(const std::string& id) { return Parse(daemon_->Cli({"get", id, "--json"})); }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(PipelineE2E, ThreeStagesTrainAndAccountEveryStagesMemory) {
  const auto t0 = std::chrono::steady_clock::now();
  const json e = Submit({"--stages", "3", "--balance", "5,4,3", "--chunks", "2", "--batches", "2",
                         "--start", "spawn"},
                        true);
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  const json& p = e["result"]["pipeline"];
  auto plan = PlanAmoebaNet(6, 16, 1000);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(p["parameters"].get<uint64_t>(), AmoebaNetParams(*plan));  // the stages hold it all
  EXPECT_EQ(p["micro_batch"], 2u);
  ASSERT_EQ(p["stage"].size(), 3u);
  const uint32_t ends[] = {5, 9, 12};
  for (uint32_t s = 0; s < 3; ++s) {
    const json& st = p["stage"][s];
    EXPECT_EQ(st["end_layer"], ends[s]);
    uint64_t params = 0;
    for (uint32_t l = st.value("first_layer", 0u); l < ends[s]; ++l) params += (*plan)[l].params;
    EXPECT_EQ(st["parameters"].get<uint64_t>(), params) << s;
    EXPECT_EQ(st["model_memory_bytes"].get<uint64_t>(), 12 * params);
    EXPECT_GT(st["peak_activation_bytes"].get<uint64_t>(), 0u) << s;
    EXPECT_GT(st["peak_pss_bytes"].get<uint64_t>(), 0u) << s;
    EXPECT_GT(st["forward_ms"].get<double>(), 0) << s;
    // The step is the stage's wall time: every phase fits in it, the rest is `other`.
    const double timed = st["forward_ms"].get<double>() + st["backward_ms"].get<double>() +
                         st["wait_ms"].get<double>() + st["optimizer_ms"].get<double>() +
                         st["data_ms"].get<double>();
    EXPECT_NEAR(st["step_ms"].get<double>(), timed + st["other_ms"].get<double>(), 1e-6) << s;
    EXPECT_GE(st["other_ms"].get<double>(), 0) << s;
    EXPECT_LE(st["step_ms"].get<double>(), p["step_ms"].get<double>()) << s;
  }
  // Against this test's own stopwatch: the two steps fit in the submit's whole wait.
  EXPECT_LT(p["step_ms"].get<double>() * 2, elapsed_ms);
  EXPECT_GT(p["stage"][2]["wait_ms"].get<double>(), 0);  // the last stage waits to be filled
  EXPECT_GT(p["bubble"].get<double>(), 0);
  const double loss = e["result"]["last_loss"].get<double>();
  EXPECT_GT(loss, 0);  // the last stage's cross-entropy over 1000 classes
  EXPECT_LT(loss, 20);
  EXPECT_TRUE(ListSegments(SegmentPrefix(e["id"].get<std::string>())).empty());
}

TEST_F(PipelineE2E, AKilledStageFailsTheRunWithItsReasonAndLeavesNothing) {
  const std::string id = Submit({"--stages", "2", "--batches", "100000"}, false)["id"];
  json e;
  ASSERT_TRUE(WaitFor(
      [&] {
        e = Get(id);
        for (const auto& p : e["processes"])
          if (p["role"] == "worker" && p["index"] == 1 && p.value("steps", 0) >= 1) return true;
        return false;
      },
      60))
      << e.dump();
  std::vector<pid_t> pids;
  pid_t victim = -1;
  for (const auto& p : e["processes"]) {
    pids.push_back(p["pid"].get<int>());
    if (p["role"] == "worker" && p["index"] == 0) victim = p["pid"].get<int>();
  }
  ASSERT_GT(victim, 0);  // never kill(-1)
  // Workers are the OOM killer's first choice, so an oversized stage never takes shoald with it.
  auto adj = ReadSmallFile("/proc/" + std::to_string(victim) + "/oom_score_adj");
  ASSERT_TRUE(adj.ok()) << adj.status().message();
  EXPECT_EQ(*adj, "1000\n");
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return Get(id).value("state", "") != "RUNNING"; }, 30));
  e = Get(id);
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_NE(e["error"].get<std::string>().find("worker 0 killed by signal 9"), std::string::npos)
      << e["error"];
  EXPECT_TRUE(WaitFor(
      [&] {
        for (pid_t p : pids)
          if (testing::ProcessAlive(p)) return false;
        return ListSegments(SegmentPrefix(id)).empty();
      },
      10));
}

TEST_F(PipelineE2E, ShapesThatCannotBeCutAreRefusedNamingTheField) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--stages", "2", "--balance", "5,5"},
       "balance: '5,5' sums to 10 but the model has 12 layers (AmoebaNet-D: L + 6)"},
      {{"--stages", "3", "--balance", "6,6"}, "balance: 2 stage(s) in '6,6' but stages is 3"},
      {{"--stages", "2", "--balance", ""}, "balance: empty; give layers per stage"},
      // Named as what was typed, not as the workers derived from it.
      {{"--stages", "0"}, "stages: 0 is outside 1..12 (a stage holds at least one layer)"},
      {{"--chunks", "3"}, "chunks: 3 micro-batches must split batch_size 4 evenly"},
      {{"--checkpoint", "sometimes"},
       "checkpoint: 'sometimes' is not one of never, except_last, always"},
      {{"--workers", "2"}, "workers: 2 but a pipeline runs one process per stage (stages 1)"},
      {{"--stages", "2", "--cuda-devices", "0,1"},
       "cuda_devices: only with device cuda (device is cpu)"},
  };
  for (const auto& [flags, why] : cases) {
    std::vector<std::string> args = {"submit",    "--kind", "pipeline",     "--layers", "6",
                                     "--filters", "16",     "--batch-size", "4"};
    args.insert(args.end(), flags.begin(), flags.end());
    const CommandResult r = daemon_->Cli(args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace shoal
