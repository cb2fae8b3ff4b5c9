// The exposition text, on made-up snapshots: every state counted (zero when none), the running
// experiment's processes labelled, label values escaped, no process figures when nothing runs.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace shoal {
namespace {

TEST(MetricsTest, StatesQueueAndTheRunningExperimentsProcesses) {
  MetricsSnapshot s;
  s.experiments[v1::QUEUED] = 2;
  s.experiments[v1::SUCCEEDED] = 5;
  const std::string idle = RenderMetrics(s);
  EXPECT_NE(idle.find("# TYPE shoal_experiments gauge\n"), std::string::npos);
  EXPECT_NE(idle.find("shoal_experiments{state=\"queued\"} 2\n"), std::string::npos);
  EXPECT_NE(idle.find("shoal_experiments{state=\"failed\"} 0\n"), std::string::npos);
  EXPECT_NE(idle.find("shoal_queue_length 2\n"), std::string::npos);
  EXPECT_EQ(idle.find("shoal_process_"), std::string::npos);
  MetricsSnapshot::Running r;
  r.id = "x0123456789";
  r.kind = "we\"ird\\kind";
  auto* p = r.sample.add_processes();
  p->set_role("worker");
  p->set_index(1);
  p->set_pss_bytes(123456789);
  auto* l = r.sample.add_processes();
  l->set_role("leader");
  l->set_index(-1);
  r.sample.set_samples_per_sec(250.5);
  s.running = r;
  const std::string out = RenderMetrics(s);
  EXPECT_NE(
      out.find("shoal_process_pss_bytes{experiment=\"x0123456789\",kind=\"we\\\"ird\\\\kind\","
               "role=\"worker\",worker=\"1\"} 123456789\n"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("role=\"leader\",worker=\"\"}"), std::string::npos);
  EXPECT_NE(out.find("shoal_experiment_samples_per_second{experiment=\"x0123456789\""),
            std::string::npos);
  EXPECT_NE(out.find("} 250.5\n"), std::string::npos);
  EXPECT_EQ(out.find("gpu"), std::string::npos);  // no NVML reading: no GPU series, not zeros

  p->set_gpu_memory_bytes(3u << 20);
  r.sample.set_gpu_memory_bytes(3u << 20);
  auto* g = r.sample.add_gpus();
  g->set_index(0);
  g->set_memory_used_bytes(5u << 20);
  g->set_util_percent(42);
  s.running = r;
  const std::string gpu = RenderMetrics(s);
  EXPECT_NE(gpu.find("shoal_process_gpu_memory_bytes{experiment=\"x0123456789\",kind=\"we\\\"ird"
                     "\\\\kind\",role=\"worker\",worker=\"1\"} 3145728\n"),
            std::string::npos)
      << gpu;
  // The leader was not in that reading: no GPU series for it (not a 0).
  EXPECT_EQ(gpu.find("shoal_process_gpu_memory_bytes{"),
            gpu.rfind("shoal_process_gpu_memory_bytes{"));
  EXPECT_NE(gpu.find("shoal_gpu_memory_used_bytes{gpu=\"0\"} 5242880\n"), std::string::npos);
  EXPECT_NE(gpu.find("shoal_gpu_utilization_percent{gpu=\"0\"} 42\n"), std::string::npos);

  // A reading whose sum is unknown (a process listed without its memory) still exports what it
  // knows: the worker's memory and the device's.
  s.running->sample.clear_gpu_memory_bytes();
  const std::string partial = RenderMetrics(s);
  EXPECT_NE(partial.find("worker=\"1\"} 3145728\n"), std::string::npos) << partial;
  EXPECT_NE(partial.find("shoal_gpu_memory_used_bytes{gpu=\"0\"} 5242880\n"), std::string::npos);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// deploy/grafana/shoal-dashboard.json queries only metrics shoald exports (a renamed metric
// would leave a panel silently empty).
TEST(MetricsTest, TheGrafanaDashboardQueriesOnlyExportedMetrics) {
  std::ifstream f(std::string(SHOAL_SOURCE_DIR) + "/deploy/grafana/shoal-dashboard.json");
  ASSERT_TRUE(f.good());
  const nlohmann::json dash = nlohmann::json::parse(f);
  MetricsSnapshot s;
  s.running = MetricsSnapshot::Running{"x0123456789", "hogwild", {}};
  auto* worker = s.running->sample.add_processes();
  worker->set_role("worker");
  worker->set_gpu_memory_bytes(1);  // with an NVML reading, so that the GPU families are there
  s.running->sample.set_gpu_memory_bytes(1);
  s.running->sample.add_gpus()->set_util_percent(1);
  const std::string text = RenderMetrics(s);
  int queries = 0;
  for (const auto& p : dash["panels"]) {
    for (const auto& t : p["targets"]) {
      const std::string expr = t["expr"];
      EXPECT_NE(text.find("# TYPE " + expr + " gauge"), std::string::npos) << expr;
      ++queries;
    }
  }
  EXPECT_GE(queries, 11);
}

}  // namespace
}  // namespace shoal
