// The GPU telemetry path end to end without a GPU: shoald loads a fake libnvidia-ml.so.1
// (tests/fake_nvml) through SHOAL_NVML_LIBRARY, which lists every shoal-worker process as using
// (pid % 61 + 1) MiB on device pid % 2 and a foreign process (pid 1) using 3 GiB. Checked: `node`,
// the refusal of device cuda by a LibTorch without CUDA, the sampled figures matched to the
// experiment's own pids, the stored result and samples, and the report's GPU tables.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;

constexpr uint64_t kMiB = 1ull << 20;

json ParseOk(const CommandResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return testing::Parse(r);
}

std::vector<std::string> FakeEnv(const std::string& extra = "") {
  std::vector<std::string> env = {std::string("SHOAL_NVML_LIBRARY=") + SHOAL_FAKE_NVML,
                                  "SHOAL_FAKE_NVML_COMM=shoal-worker", "SHOAL_FAKE_NVML_DEVICES=2",
                                  "SHOAL_FAKE_NVML_UTIL=37", "SHOAL_FAKE_NVML_FOREIGN_PID=1"};
  if (!extra.empty()) env.push_back(extra);
  return env;
}

const json& Table(const json& report, const std::string& key) {
  for (const auto& t : report["tables"])
    if (t["key"] == key) return t;
  static const json none;
  return none;
}

TEST(GpuE2E, NodeShowsNvmlsDevicesAndWhyCudaCannotRun) {
  testing::TempDir dir;
  testing::Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start({}, FakeEnv()));
  const json n = ParseOk(d.Cli({"node", "--json"}));
  ASSERT_EQ(n["gpus"].size(), 2u) << n.dump(2);
  EXPECT_EQ(n["gpus"][1]["name"], "Shoal Fake GPU 1");
  EXPECT_EQ(n["gpus"][0]["compute_capability"], "9.0");
  EXPECT_EQ(n["gpus"][0]["memory_total_bytes"], 80ull << 30);
  EXPECT_EQ(n["gpus"][0]["util_percent"], 37);
  EXPECT_EQ(n["versions"]["nvidia_driver"], "999.99-fake");
  EXPECT_EQ(n["versions"]["cuda_driver"], "13.0");
  // NVML sees GPUs, but this LibTorch cannot use them: cuda is refused, saying so.
  EXPECT_EQ(n["cuda_status"].get<std::string>().rfind("no CUDA: LibTorch", 0), 0u) << n.dump(2);
  const CommandResult cuda = d.Cli({"submit", "--device", "cuda", "--start", "spawn"});
  EXPECT_NE(cuda.exit_code, 0);
  EXPECT_NE(cuda.err.find("device cuda: no CUDA: LibTorch"), std::string::npos) << cuda.err;
  EXPECT_EQ(d.Cli({"list", "--json"}).out.find("\"id\""), std::string::npos);  // nothing ran

  testing::Daemon broken(dir / "state2", dir / "s2.sock");  // a driver that is not loaded
  ASSERT_TRUE(broken.Start({}, FakeEnv("SHOAL_FAKE_NVML_INIT_ERROR=9")));
  const json b = ParseOk(broken.Cli({"node", "--json"}));
  EXPECT_TRUE(b["gpus"].empty());
  EXPECT_EQ(b["gpu_status"],
            "no GPU: nvmlInit failed with NVML error 9 (is the NVIDIA driver loaded?)");
}

TEST(GpuE2E, SampledGpuFiguresAreTheExperimentsOwnAndReachTheReport) {
  testing::TempDir dir;
  testing::Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start({}, FakeEnv()));
  const json j =
      // 40 batches: the NVML readings wait until their cost fits the budget (100-200 ms apart),
      // and a 10-batch training on a loaded machine fell between two (no utilisation, absent).
      ParseOk(d.Cli({"sweep", "--workers", "2", "--device", "cpu,cuda", "--start", "spawn",
                     "--batches", "40", "--batch-size", "8", "--dataset", "synthetic",
                     "--eval-samples", "0", "--sample-interval-ms", "50", "--wait", "--json"}));
  ASSERT_EQ(j["experiments"].size(), 1u) << j.dump(2);  // the cuda point cannot run here
  const json& e = j["experiments"][0];
  ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
  const json& r = e["result"];
  // Every shoal-worker of the experiment, matched by pid: exactly what the fake gives its pid.
  // The leader is shoal-leader (spawn), which the fake puts on no GPU: its figure is absent.
  uint64_t sum = 0, biggest = 0;
  EXPECT_EQ(r["leader_program"], "shoal-leader");
  for (const auto& p : e["processes"]) {
    if (p["role"] == "leader") {
      EXPECT_TRUE(p["peak_gpu_memory_bytes"].is_null()) << p.dump();
      continue;
    }
    const uint64_t want = (p["pid"].get<uint64_t>() % 61 + 1) * kMiB;
    EXPECT_EQ(p["peak_gpu_memory_bytes"].get<uint64_t>(), want) << p.dump();
    sum += want;
    biggest = std::max(biggest, want);
  }
  ASSERT_EQ(e["processes"].size(), 3u);  // leader and two workers
  const uint64_t peak = r["peak_gpu_memory_bytes"].get<uint64_t>();
  EXPECT_GE(peak, biggest);
  EXPECT_LE(peak, sum);  // pid 1's 3 GiB is someone else's
  EXPECT_DOUBLE_EQ(r["gpu_util_mean_percent"].get<double>(), 37);
  EXPECT_DOUBLE_EQ(r["gpu_util_peak_percent"].get<double>(), 37);
  EXPECT_GT(r["gpu_reads"].get<uint64_t>(), 0u);

  // The kept samples carry both devices and the per-process figures.
  const json s = ParseOk(d.Cli({"get", e["id"], "--samples", "--format", "json"}));
  bool seen = false;
  for (const auto& x : s["samples"]) {
    if (x["gpus"].empty()) continue;  // a tick without a reading
    EXPECT_EQ(x["gpus"].size(), 2u);
    EXPECT_GE(x["gpus"][0]["memory_used_bytes"].get<uint64_t>(), 512 * kMiB);
    seen = seen || x.contains("gpu_memory_bytes");
  }
  EXPECT_TRUE(seen) << s.dump();

  // The report's GPU tables: the cpu point's NVML figures; the cuda point says why it did not run.
  const json& mem = Table(j, "gpu_memory_gib");
  ASSERT_EQ(mem["rows"].size(), 1u) << j["tables"].dump(2);
  EXPECT_NEAR(mem["rows"][0]["cells"][0]["value"].get<double>(), double(peak) / (1ull << 30), 0.01);
  EXPECT_EQ(mem["rows"][0]["cells"][1]["text"], "n/a");
  // Pid 1 holds 3 GiB on device 0 beside the experiment: where the experiment used device 0, it
  // ran disturbed and says so.
  const bool named = r["disturbance"].get<std::string>().find(
                         "other GPU process(es) on its devices (pid 1") != std::string::npos;
  EXPECT_EQ(r["disturbed"].get<bool>(), named) << r.dump();
  bool no_cuda = false;
  for (const auto& f : mem["footnotes"])
    no_cuda = no_cuda || f.get<std::string>().rfind("no CUDA: LibTorch", 0) == 0;
  EXPECT_TRUE(no_cuda) << mem.dump();
  EXPECT_EQ(Table(j, "gpu_util_percent")["rows"][0]["cells"][0]["text"], "37");
  const CommandResult md = d.Cli({"report", j["sweep"]["id"]});
  EXPECT_NE(md.out.find("## GPU memory"), std::string::npos) << md.out;
  const CommandResult get = d.Cli({"get", e["id"]});
  EXPECT_NE(get.out.find("GPU         peak memory"), std::string::npos) << get.out;
  // The GPU pictures: the cpu point's utilisation, drawn against the device axis.
  const CommandResult svg =
      d.Cli({"report", j["sweep"]["id"], "--format", "svg", "--plot", "gpu-util"});
  ASSERT_EQ(svg.exit_code, 0) << svg.err;
  EXPECT_NE(svg.out.find("GPU utilisation (NVML, mean while training)"), std::string::npos);
  size_t circles = 0;
  for (size_t at = svg.out.find("<circle"); at != std::string::npos;
       at = svg.out.find("<circle", at + 1))
    ++circles;
  EXPECT_EQ(circles, 1u) << svg.out;  // cpu: 37%; cuda did not run
}

// What the GPU really does, on the fake NVML: GPM's figures while training, and energy from
// the counter over the training window (2 devices at 200 W: 400 W), per sample (96 batches: a
// window under 1 s has no energy, and 16 batches trained in 0.58 s on a fast machine); with GPM
// unsupported, its figures are absent and the result says why. CPU energy is the node's own:
// measured where powercap's RAPL zones are readable, else absent saying why.
TEST(GpuE2E, GpmActivityAndEnergyPerSampleReachTheResultAndTheReport) {
  testing::TempDir dir;
  testing::Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start({}, FakeEnv("SHOAL_FAKE_NVML_POWER_W=200")));
  const std::vector<std::string> run = {"sweep",      "--workers",
                                        "2",          "--start",
                                        "spawn,fork", "--batches",
                                        "96",         "--batch-size",
                                        "8",          "--dataset",
                                        "synthetic",  "--eval-samples",
                                        "0",          "--sample-interval-ms",
                                        "50",         "--wait",
                                        "--json"};
  const json j = ParseOk(d.Cli(run));
  ASSERT_EQ(j["experiments"].size(), 2u);
  for (const auto& e : j["experiments"]) {
    ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
    const json& r = e["result"];
    EXPECT_DOUBLE_EQ(r["gpu_sm_active_percent"].get<double>(), 61.5) << r.dump();
    EXPECT_DOUBLE_EQ(r["gpu_sm_occupancy_percent"].get<double>(), 33.25);
    EXPECT_DOUBLE_EQ(r["gpu_tensor_active_percent"].get<double>(), 12.5);
    EXPECT_DOUBLE_EQ(r["gpu_dram_bw_percent"].get<double>(), 44);
    ASSERT_TRUE(r["gpu_energy_j"].is_number()) << r["gpu_energy_status"];
    // 200 W for each device its processes used (the fake puts pid P on device P % 2).
    std::set<uint64_t> devices;
    for (const auto& p : e["processes"]) devices.insert(p["pid"].get<uint64_t>() % 2);
    const double watts = 200.0 * double(devices.size());
    EXPECT_NEAR(r["gpu_power_mean_w"].get<double>(), watts, watts * 0.05);
    EXPECT_NEAR(r["gpu_joules_per_sample"].get<double>(),
                r["gpu_power_mean_w"].get<double>() / r["samples_per_sec"].get<double>(), 1e-9);
    if (r["cpu_energy_j"].is_number()) {
      EXPECT_GT(r["cpu_power_mean_w"].get<double>(), 0);
    } else {
      EXPECT_EQ(r["cpu_energy_status"].get<std::string>().rfind("CPU energy: ", 0), 0u);
    }
  }
  EXPECT_EQ(Table(j, "gpu_sm_active_percent")["rows"][0]["cells"][0]["text"], "61.5");
  EXPECT_TRUE(Table(j, "gpu_joules_per_sample")["rows"][0]["cells"][0]["value"].is_number());
  const CommandResult get = d.Cli({"get", j["experiments"][0]["id"]});
  EXPECT_NE(get.out.find("GPU activity SM active 61.5%, SM occupancy 33.2%"), std::string::npos)
      << get.out;
  EXPECT_NE(get.out.find("  energy      GPU "), std::string::npos) << get.out;

  testing::TempDir old_dir;
  testing::Daemon old(old_dir / "state", old_dir / "s.sock");
  ASSERT_TRUE(old.Start({}, FakeEnv("SHOAL_FAKE_NVML_GPM=0")));
  // Long enough that NVML readings see its worker on a GPU (5 batches could end between them).
  const json o = ParseOk(old.Cli({"submit", "--workers", "1", "--start", "spawn", "--batches", "40",
                                  "--batch-size", "8", "--dataset", "synthetic", "--eval-samples",
                                  "0", "--sample-interval-ms", "50", "--wait", "--json"}));
  EXPECT_FALSE(o["result"].contains("gpu_sm_active_percent") &&
               o["result"]["gpu_sm_active_percent"].is_number());
  EXPECT_EQ(o["result"]["gpm_status"],
            "GPM: not supported on this GPU (compute capability 9.0; GPM needs Hopper, 9.0, or "
            "newer)");
}

}  // namespace
}  // namespace shoal
