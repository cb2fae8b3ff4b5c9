// The reshaped core end to end: optimiser and batch-size sweeps on real Fashion-MNIST whose
// reports fill every cell, explicit values kept or refused, never replaced.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "shared/os/shm.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::TempDir;

using testing::kFashion;
using testing::Parse;

class KindsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start({"--grace-ms", "1000"}));
  }
  // Every cell of the table `key` holds a number; returns the table.
  json FilledTable(const json& report, const std::string& key) {
    for (const auto& t : report["tables"]) {
      if (t["key"] != key) continue;
      for (const auto& row : t["rows"])
        for (const auto& c : row["cells"])
          EXPECT_TRUE(c["value"].is_number()) << key << ": " << row.dump();
      return t;
    }
    ADD_FAILURE() << "no table " << key;
    return json();
  }
  // Like FilledTable, but row `row`'s cell `column` must be "-" (a figure that cannot exist).
  json FilledTableExcept(const json& report, const std::string& key, size_t row, size_t column) {
    for (const auto& t : report["tables"]) {
      if (t["key"] != key) continue;
      for (size_t i = 0; i < t["rows"].size(); ++i)
        for (size_t k = 0; k < t["rows"][i]["cells"].size(); ++k) {
          const json& c = t["rows"][i]["cells"][k];
          if (i == row && k == column) {
            EXPECT_EQ(c["text"], "-") << key;
          } else {
            EXPECT_TRUE(c["value"].is_number()) << key << ": " << t["rows"][i].dump();
          }
        }
      return t;
    }
    ADD_FAILURE() << "no table " << key;
    return json();
  }
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(KindsE2E, OptimiserSweepComparesLossAndAccuracy) {
  CommandResult r = daemon_->Cli({"sweep", "--optimizer", "sgd,adadelta,adam", "--epochs", "2",
                                  "--epoch-samples", "96", "--batch-size", "32", "--eval-samples",
                                  "100", "--dataset", kFashion, "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  ASSERT_EQ(j["experiments"].size(), 3u);  // the five others: tests/optimizer_test.cc's goldens
  for (const auto& e : j["experiments"]) {
    EXPECT_EQ(e["state"], "SUCCEEDED") << e["error"];
    EXPECT_EQ(e["result"]["epochs"].size(), 2u);
    EXPECT_EQ(e["result"]["curve"].size(), 6u);  // 3 batches an epoch, a point a step
  }
  // Each optimiser ran with its own defaults (PyTorch 1.13's).
  EXPECT_DOUBLE_EQ(j["experiments"][1]["spec"]["optimizer"]["lr"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["experiments"][2]["spec"]["optimizer"]["lr"].get<double>(), 0.001);
  EXPECT_TRUE(j["experiments"][2]["spec"]["optimizer"]["momentum"].is_null());
  for (const char* key : {"final_loss", "test_accuracy", "loss_by_step", "loss_by_time",
                          "accuracy_by_epoch", "time_by_epoch", "epoch_train_s"}) {
    const json t = FilledTable(j, key);
    if (std::string(key) == "loss_by_step") {
      EXPECT_EQ(t["rows"].size(), 3u);
    }
  }
  const std::string id = j["sweep"]["id"];
  CommandResult svg = daemon_->Cli({"report", id, "--format", "svg"});
  ASSERT_EQ(svg.exit_code, 0) << svg.err;
  size_t lines = 0;
  for (size_t at = 0; (at = svg.out.find("<polyline", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 3u);  // one loss curve per optimiser
  EXPECT_NE(svg.out.find("optimizer adadelta"), std::string::npos);
}

// multi_model on real processes: every variant of every point reported, in its own worker, the
// report's tables filled where a variant exists, nothing left behind.
TEST_F(KindsE2E, MultiModelSweepReportsEveryVariant) {
  CommandResult r =
      // 60 iterations sampled every 20 ms: with OpenBLAS a variant of one model runs 20
      // iterations in ~30 ms, which the default 200 ms sampling catches only by chance.
      daemon_->Cli({"sweep", "--kind", "multi_model", "--models", "1,3", "--iterations", "60",
                    "--sample-interval-ms", "20", "--start", "fork,forkserver", "--wait",
                    "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  ASSERT_EQ(j["experiments"].size(), 4u);
  for (const auto& e : j["experiments"]) {
    ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
    const uint32_t n = e["spec"]["multi_model"]["models"];
    const auto& vs = e["result"]["multi_model"]["variants"];
    ASSERT_EQ(vs.size(), n == 1 ? 2u : 3u) << e.dump();
    std::set<int> pids;
    for (const auto& p : e["processes"]) {
      if (p["role"] == "worker") pids.insert(p["pid"].get<int>());
      EXPECT_FALSE(testing::ProcessAlive(p["pid"].get<int>()));
    }
    EXPECT_EQ(pids.size(), vs.size());  // a process per variant
    for (const auto& v : vs) {
      EXPECT_EQ(v["parameters"].get<uint64_t>(), 131584u * n) << v.dump();
      EXPECT_EQ(v["iterations"].get<uint64_t>(), 60u);
      EXPECT_GT(v["total_ms"].get<double>(), v["forward_ms"].get<double>());
      EXPECT_GT(v["peak_allocated_bytes"].get<double>(), 131584.0 * n * 4);  // the weights at least
      EXPECT_GT(v["peak_pss_bytes"].get<double>(), 0);
      EXPECT_GT(v["peak_rss_bytes"].get<double>(), v["peak_allocated_bytes"].get<double>());
    }
    EXPECT_TRUE(ListSegments(SegmentPrefix(e["id"].get<std::string>())).empty());
  }
  for (const char* key : {"variant_ms_per_iteration", "variant_vs_separate",
                          "variant_peak_allocated_mib", "variant_phase_ms_per_iteration"}) {
    bool found = false;
    for (const auto& t : j["tables"]) {
      if (t["key"] != key) continue;
      found = true;
      EXPECT_EQ(t["rows"].size(), std::string(key) == "variant_phase_ms_per_iteration" ? 50u : 10u);
      for (const auto& row : t["rows"]) {
        int numbers = 0;
        for (const auto& c : row["cells"]) numbers += c["value"].is_number();
        EXPECT_EQ(numbers, 1) << key << ": " << row.dump();  // n = 1 or n = 3, not both
        if (std::string(key) == "variant_vs_separate" &&
            (row["labels"][1] == "linear" || row["labels"][1] == "mlinear"))
          for (const auto& c : row["cells"]) {
            if (c["value"].is_number()) {
              EXPECT_DOUBLE_EQ(c["value"].get<double>(), 1.0);
            }
          }
      }
    }
    EXPECT_TRUE(found) << key;
  }
}

// baseline, the kind added as docs/architecture.md says (its folders, a registry line each, its
// messages): its own field (touch_mib) and figure (ns_per_page) through every start method, read
// against the sampler (an independent reader of the same memory), in `get` and the report.
TEST_F(KindsE2E, BaselineTouchesItsMemoryUnderEveryStartMethod) {
  CommandResult r = daemon_->Cli({"sweep", "--kind", "baseline", "--workers", "2", "--touch-mib",
                                  "48", "--hold-ms", "600", "--sample-interval-ms", "50", "--start",
                                  "fork,spawn,forkserver", "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  ASSERT_EQ(j["experiments"].size(), 3u);
  for (const auto& e : j["experiments"]) {
    SCOPED_TRACE(e["spec"]["start"].get<std::string>());
    ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
    EXPECT_EQ(e["spec"]["baseline"]["touch_mib"], 48u);
    const json& b = e["result"]["baseline"];
    EXPECT_EQ(b["workers_touched"], 2u);
    EXPECT_GT(b["ns_per_page"].get<double>(), 0);
    EXPECT_GT(b["touch_ms"].get<double>(), 0);
    EXPECT_GT(b["minor_faults"].get<uint64_t>(), 0u);
    for (const auto& p : e["processes"]) {
      if (p["role"] != "worker") continue;
      // The sampler saw each worker hold its 48 MiB (the hold outlasts several ticks).
      EXPECT_GE(p["peak_pss_bytes"].get<double>(), 48.0 * (1 << 20)) << p.dump();
      EXPECT_FALSE(testing::ProcessAlive(p["pid"].get<int>()));
    }
    const CommandResult get = daemon_->Cli({"get", e["id"]});
    EXPECT_NE(get.out.find("  touch       48 MiB a worker in "), std::string::npos) << get.out;
    EXPECT_TRUE(ListSegments(SegmentPrefix(e["id"].get<std::string>())).empty());
  }
  FilledTable(j, "baseline_touch");
  // Its fields are its own: refused on another kind, naming whose they are.
  const CommandResult other = daemon_->Cli({"submit", "--touch-mib", "8"});
  EXPECT_NE(other.err.find("touch_mib: not a field of kind hogwild (it is baseline's)"),
            std::string::npos)
      << other.err;
}

// data_loading on real processes and Fashion-MNIST: loaders started by spawn attach to the data
// and the ring by name, the trainer trains on their batches, every epoch and process is measured.
TEST_F(KindsE2E, DataLoadingSweepMeasuresLoadersAndTrainer) {
  CommandResult r =
      daemon_->Cli({"sweep", "--kind", "data_loading", "--loaders", "0,2", "--start", "spawn",
                    "--epochs", "2", "--epoch-samples", "160", "--batch-size", "32",
                    "--eval-samples", "200", "--dataset", kFashion, "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  ASSERT_EQ(j["experiments"].size(), 2u);
  for (const auto& e : j["experiments"]) {
    ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
    const uint32_t loaders = e["spec"]["data_loading"]["loaders"];
    EXPECT_EQ(e["spec"]["workers"], loaders + 1);
    const auto& res = e["result"];
    EXPECT_EQ(res["samples"], 320u);  // 2 epochs of 160, every batch trained once
    EXPECT_EQ(res["steps"], 10u);
    ASSERT_EQ(res["epochs"].size(), 2u);
    ASSERT_EQ(res["data_loading"]["epochs"].size(), 2u);  // the kind's own figure, by epoch
    for (const auto& x : res["data_loading"]["epochs"])
      EXPECT_GT(x["load_cpu_ms"].get<double>(), 0) << x.dump();
    for (const auto& x : res["epochs"]) {
      EXPECT_GT(x["train_ms"].get<double>(), 0);
      EXPECT_EQ(x["samples"], 160u);
    }
    EXPECT_GT(res["test_accuracy"].get<double>(), 0.1);  // better than chance on 10 classes
    int workers = 0;
    for (const auto& p : e["processes"]) {
      EXPECT_FALSE(testing::ProcessAlive(p["pid"].get<int>()));
      if (p["role"] != "worker") continue;
      ++workers;
      EXPECT_GT(p["peak_pss_bytes"].get<double>(), 0) << p.dump();
      EXPECT_EQ(p["exit_code"], 0);
    }
    EXPECT_EQ(workers, int(loaders) + 1);
    EXPECT_TRUE(ListSegments(SegmentPrefix(e["id"].get<std::string>())).empty());
  }
  FilledTable(j, "data_loading_epoch_s");
  const json mem = FilledTableExcept(j, "data_loading_memory_mib", 0, 1);  // no loaders: "-"
  ASSERT_EQ(mem["rows"].size(), 2u);
  CommandResult get = daemon_->Cli({"get", j["experiments"][1]["id"]});
  EXPECT_NE(get.out.find("load CPU s"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find(" loader "), std::string::npos) << get.out;
}

TEST_F(KindsE2E, BatchSizeSweepPrintsEpochTwoTrainingTime) {
  CommandResult r =
      daemon_->Cli({"sweep", "--batch-size", "8,32,128", "--epochs", "2", "--epoch-samples", "150",
                    "--eval-samples", "0", "--dataset", kFashion, "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  const json t = FilledTable(j, "epoch_train_s");
  EXPECT_EQ(t["column_field"], "batch_size");
  EXPECT_EQ(t["columns"], json::array({"8", "32", "128"}));
  ASSERT_EQ(t["rows"].size(), 1u);
  for (const auto& e : j["experiments"]) {
    const auto& ep = e["result"]["epochs"];
    ASSERT_EQ(ep.size(), 2u);
    EXPECT_EQ(ep[1]["samples"], 150u);  // the whole cut epoch, the last batch short
    EXPECT_LT(ep[1]["train_ms"].get<double>(), ep[1]["wall_ms"].get<double>());
  }
  CommandResult md = daemon_->Cli({"report", j["sweep"]["id"]});
  EXPECT_NE(md.out.find("## Training time of epoch 2 (s)"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| 8 | 32 | 128 |"), std::string::npos) << md.out;
}

TEST_F(KindsE2E, ExplicitValuesAreRefusedOrKeptNeverReplaced) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"submit", "--workers", "0"}, "workers: 0 is outside the allowed range 1..64"},
      {{"submit", "--batches", "0"}, "batches: 0 is outside the allowed range"},
      {{"submit", "--batch-size", "0"}, "batch_size: 0 is outside the allowed range"},
      {{"submit", "--dataset", ""}, "dataset: empty"},
      {{"submit", "--name", ""}, "name: empty"},
      {{"sweep", "--workers", "1,2", "--name", ""}, "name: empty"},
      {{"submit", "--sample-interval-ms", "0"}, "sample_interval_ms: 0 is outside"},
      {{"submit", "--workers", "1,2"}, "workers: submit takes one value"},
      {{"submit", "--workers", "two"}, "workers: 'two' is not a whole number"},
      {{"submit", "--rho", "0.5"}, "rho: does not apply to optimizer sgd"},
      {{"submit", "--optimizer", "lbfgs"}, "optimizer: 'lbfgs' is not one of"},
      {{"submit", "--epochs", "2", "--batches", "3"}, "batches, epochs: give one of them"},
      {{"sweep", "--workers", "0,1"}, "workers: 0 is outside the allowed range 1..64"},
      {{"sweep", "--bogus-field", "1,2"}, "bogus-field"},
  };
  for (const auto& [args, want] : refused) {
    CommandResult c = daemon_->Cli(args);
    EXPECT_NE(c.exit_code, 0) << args[1];
    EXPECT_NE(c.err.find(want), std::string::npos) << args[1] << ": " << c.err;
  }
  EXPECT_TRUE(Parse(daemon_->Cli({"list", "--json"}))["experiments"].empty());  // nothing started

  CommandResult ok = daemon_->Cli({"submit", "--stall-timeout-ms", "0", "--momentum", "0",
                                   "--batches", "2", "--eval-samples", "0", "--wait", "--json"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const json e = Parse(ok);
  EXPECT_EQ(e["spec"]["stall_timeout_ms"], 0);
  EXPECT_EQ(e["spec"]["optimizer"]["momentum"], 0.0);
  EXPECT_EQ(e["spec"]["batches"], 2);
  EXPECT_TRUE(e["spec"]["epochs"].is_null());
}

}  // namespace
}  // namespace shoal
