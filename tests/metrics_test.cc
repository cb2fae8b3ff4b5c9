// The exposition text, on made-up snapshots: every state counted (zero when none), the running
// experiment's processes labelled, label values escaped, no process figures when nothing runs.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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

// The node's families, idle: what NVML gave of each device (and nothing it did not), /dev/shm,
// the forkserver, the build; named after dcgm-exporter's fields, in base units.
TEST(MetricsTest, AnIdleNodeIsDescribed) {
  MetricsSnapshot s;
  v1::GpuDeviceSample g;
  g.set_index(0);
  g.set_memory_used_bytes(1u << 30);
  g.set_power_mw(151500);
  g.set_energy_mj(2000);
  g.set_sm_active_percent(50);
  s.node.gpus = {g};
  s.node.shm_free_bytes = 7;
  s.node.fork_server_up = true;
  s.node.fork_server_restarts = 2;
  s.node.build = {{"shoal", "0.1.0"}, {"libtorch", "1.13.0"}};
  s.node.cpu_energy_joules = 12.5;
  const std::string out = RenderMetrics(s);
  for (const char* line :
       {"shoal_gpu_memory_used_bytes{gpu=\"0\"} 1073741824\n",
        "shoal_gpu_power_watts{gpu=\"0\"} 151.5\n",
        "# TYPE shoal_gpu_energy_joules_total counter\n",
        "shoal_gpu_energy_joules_total{gpu=\"0\"} 2\n",
        "shoal_gpu_sm_active_ratio{gpu=\"0\"} 0.5\n", "shoal_shm_free_bytes 7\n",
        "shoal_forkserver_up 1\n", "shoal_forkserver_restarts_total 2\n",
        "# TYPE shoal_cpu_energy_joules_total counter\n", "shoal_cpu_energy_joules_total 12.5\n",
        "shoal_build_info{libtorch=\"1.13.0\",shoal=\"0.1.0\"} 1\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  // What NVML did not give, and /dev/shm's size unread: no series, not zeros.
  for (const char* absent :
       {"shoal_gpu_utilization_percent", "shoal_gpu_tensor_active_ratio", "shoal_shm_total_bytes"})
    EXPECT_EQ(out.find(absent), std::string::npos) << absent;
}

// The labels dcgm-exporter's users filter by: Hostname on every series, each GPU's UUID,
// modelName and device; and the experiment's sweep and name beside its id and kind.
TEST(MetricsTest, EverySeriesCarriesItsHostAndAGpuItsIdentity) {
  MetricsSnapshot s;
  s.experiments = {{v1::QUEUED, 1}};
  v1::GpuDeviceSample g;
  g.set_index(0);
  g.set_util_percent(42);
  s.node.gpus = {g};
  s.node.gpu_identity[0] = {"GPU-1234-abcd", "NVIDIA H200"};
  s.node.hostname = "node7";
  s.node.build = {{"shoal", "0.1.0"}};
  MetricsSnapshot::Running r;
  r.id = "x0123456789";
  r.kind = "hogwild";
  r.sweep = "s0123456789";
  r.name = "baseline";
  r.sample.set_steps(3);
  s.running = r;
  const std::string out = RenderMetrics(s);
  for (const char* line :
       {"shoal_experiments{Hostname=\"node7\",state=\"queued\"} 1\n",
        "shoal_queue_length{Hostname=\"node7\"} 1\n",
        "shoal_build_info{Hostname=\"node7\",shoal=\"0.1.0\"} 1\n",
        "shoal_gpu_utilization_percent{Hostname=\"node7\",gpu=\"0\",UUID=\"GPU-1234-abcd\","
        "modelName=\"NVIDIA H200\",device=\"nvidia0\"} 42\n",
        "shoal_experiment_steps{Hostname=\"node7\",experiment=\"x0123456789\",kind=\"hogwild\","
        "sweep=\"s0123456789\",name=\"baseline\"} 3\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  // Every sample line has its Hostname.
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] != '#') {
      EXPECT_NE(line.find("Hostname=\"node7\""), std::string::npos) << line;
    }
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
  s.running = MetricsSnapshot::Running{"x0123456789", "hogwild", "", "", {}};
  auto* worker = s.running->sample.add_processes();
  worker->set_role("worker");
  worker->set_gpu_memory_bytes(1);  // with an NVML reading, so that the GPU families are there
  s.running->sample.set_gpu_memory_bytes(1);
  auto* gpu = s.running->sample.add_gpus();
  gpu->set_util_percent(1);
  gpu->set_memory_used_bytes(1);  // a family is there when NVML gave a figure of it
  const std::string text = RenderMetrics(s);
  int queries = 0;
  for (const auto& p : dash["panels"]) {
    for (const auto& t : p["targets"]) {
      const std::string expr = t["expr"];
      const std::string metric = expr.substr(0, expr.find('{'));
      EXPECT_NE(text.find("# TYPE " + metric + " gauge"), std::string::npos) << expr;
      // Each panel follows the dashboard's Host choice (dcgm-exporter's Hostname label).
      EXPECT_EQ(expr.substr(metric.size()), "{Hostname=~\"$Hostname\"}") << expr;
      ++queries;
    }
  }
  EXPECT_GE(queries, 11);
  bool host_variable = false;
  for (const auto& v : dash["templating"]["list"])
    host_variable = host_variable || (v["name"] == "Hostname" &&
                                      v["query"] == "label_values(shoal_build_info, Hostname)");
  EXPECT_TRUE(host_variable);
}

}  // namespace
}  // namespace shoal
