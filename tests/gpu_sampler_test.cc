// The GPU side of the sampler against a scripted monitor: pid matching, the experiment's sum and
// peaks, utilisation over training ticks of its own devices only, the budget, and why figures
// are absent. Also what shoald makes of the worker's `--version` and of a node without CUDA.
#include "server/gpu_sampler.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "server/node_info.h"
#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

class ScriptedGpu : public GpuMonitor {
 public:
  GpuProbe Probe() override { return {}; }
  StatusOr<GpuReading> Read() override {
    ++reads;
    if (!why.empty()) return FailedPrecondition(why);
    return reading;
  }
  GpuReading reading;
  std::string why;
  int reads = 0;
};

GpuDevice Device(uint32_t index, uint32_t util) {
  GpuDevice d;
  d.index = index;
  d.memory_total = 80ull << 30;
  d.memory_used = 4ull << 30;
  d.util_percent = util;
  return d;
}

v1::Sample WithProcesses(std::initializer_list<pid_t> pids) {
  v1::Sample s;
  for (pid_t p : pids) s.add_processes()->set_pid(p);
  return s;
}

struct Fixture {
  ScriptedGpu gpu;
  uint64_t cpu = 0;
  GpuSampler sampler{&gpu, [this] { return cpu; }};
};

TEST(GpuSamplerTest, MatchesTheExperimentsPidsAndIgnoresOthers) {
  Fixture f;
  f.gpu.reading.devices = {Device(0, 50), Device(1, 90)};
  f.gpu.reading.processes = {{100, 0, 300 * kMiB, 40},  // a worker
                             {101, 0, 200 * kMiB, {}},
                             {101, 1, 50 * kMiB, 7},      // the same worker on a second device
                             {999, 0, 3072 * kMiB, 60}};  // someone else's
  v1::Sample s = WithProcesses({100, 101, 102});
  f.sampler.Tick(1'000'000'000, true, &s);
  ASSERT_EQ(s.gpus_size(), 2);
  EXPECT_EQ(s.gpus(1).util_percent(), 90u);
  EXPECT_EQ(s.processes(0).gpu_memory_bytes(), 300 * kMiB);
  EXPECT_EQ(s.processes(0).gpu_util_percent(), 40);
  EXPECT_EQ(s.processes(1).gpu_memory_bytes(), 250 * kMiB);
  ASSERT_TRUE(s.processes(2).has_gpu_memory_bytes());
  EXPECT_EQ(s.processes(2).gpu_memory_bytes(), 0u);  // read, and not listed: none
  EXPECT_FALSE(s.processes(2).has_gpu_util_percent());
  EXPECT_EQ(s.gpu_memory_bytes(), 550 * kMiB);

  f.gpu.reading.processes.pop_back();
  f.gpu.reading.processes[0].used_bytes = 100 * kMiB;  // worker 100 shrinks, later
  v1::Sample later = WithProcesses({100, 101});
  f.sampler.Tick(2'000'000'000, false, &later);
  v1::Result r;
  f.sampler.Fill(&r);
  EXPECT_EQ(r.peak_gpu_memory_bytes(), 550 * kMiB);  // the peak of the sum, not a sum of peaks
  EXPECT_EQ(*f.sampler.PeakOf(100), 300 * kMiB);
  EXPECT_FALSE(f.sampler.PeakOf(102).has_value());
  // Utilisation: the training tick only, over both of its devices: (50 + 90) / 2.
  EXPECT_DOUBLE_EQ(r.gpu_util_mean_percent(), 70);
  EXPECT_DOUBLE_EQ(r.gpu_util_peak_percent(), 90);
  EXPECT_EQ(r.gpu_reads(), 2u);
  EXPECT_TRUE(r.gpu_status().empty());
}

TEST(GpuSamplerTest, UtilisationCountsOnlyTheDevicesItsProcessesUsed) {
  Fixture f;
  f.gpu.reading.devices = {Device(0, 20), Device(1, 100)};
  f.gpu.reading.processes = {{100, 0, kMiB, {}}, {999, 1, kMiB, {}}};
  v1::Sample s = WithProcesses({100});
  f.sampler.Tick(1, true, &s);
  v1::Result r;
  f.sampler.Fill(&r);
  EXPECT_DOUBLE_EQ(r.gpu_util_mean_percent(), 20);      // device 1 is someone else's
  EXPECT_TRUE(f.sampler.foreign_on_devices().empty());  // and nobody else was on device 0
}

// A process that is not the experiment's, on one of the experiment's devices, disturbs it (the
// disturbance meter names it); one on another device does not.
TEST(GpuSamplerTest, OtherProcessesOnItsDevicesAreNoted) {
  Fixture f;
  f.gpu.reading.devices = {Device(0, 20), Device(1, 100)};
  f.gpu.reading.processes = {{100, 0, kMiB, {}}, {999, 1, kMiB, {}}, {777, 0, kMiB, {}}};
  v1::Sample s = WithProcesses({100});
  f.sampler.Tick(1, true, &s);
  EXPECT_EQ(f.sampler.foreign_on_devices(), std::set<pid_t>({777}));
  // A worker NVML listed before the runner knew its pid is the experiment's, not a foreign one.
  f.gpu.reading.processes.push_back({101, 0, kMiB, {}});
  v1::Sample early = WithProcesses({100});
  f.sampler.Tick(2, true, &early);
  v1::Sample later = WithProcesses({100, 101});
  f.sampler.Tick(3, true, &later);
  EXPECT_EQ(f.sampler.foreign_on_devices(), std::set<pid_t>({777}));
}

// NVML may list a process without its memory (some containers, MIG) or fail a device's memory
// query: those figures are unknown, so they are absent, and so is any sum they would be part of.
TEST(GpuSamplerTest, WhatNvmlDidNotSayIsAbsentNotZero) {
  Fixture f;
  GpuDevice mute = Device(0, 30);
  mute.memory_total.reset();
  mute.memory_used.reset();
  f.gpu.reading.devices = {mute};
  f.gpu.reading.processes = {{100, 0, 300 * kMiB, {}}, {101, 0, {}, {}}};
  v1::Sample s = WithProcesses({100, 101});
  f.sampler.Tick(1'000'000'000, true, &s);
  ASSERT_EQ(s.gpus_size(), 1);
  EXPECT_FALSE(s.gpus(0).has_memory_used_bytes());
  EXPECT_FALSE(s.gpus(0).has_memory_total_bytes());
  EXPECT_EQ(s.gpus(0).util_percent(), 30u);
  EXPECT_EQ(s.processes(0).gpu_memory_bytes(), 300 * kMiB);
  EXPECT_FALSE(s.processes(1).has_gpu_memory_bytes());
  EXPECT_FALSE(s.has_gpu_memory_bytes());
  EXPECT_FALSE(f.sampler.PeakOf(101).has_value());
  v1::Result r;
  f.sampler.Fill(&r);
  EXPECT_FALSE(r.has_peak_gpu_memory_bytes());  // its only reading had no sum
  EXPECT_EQ(r.gpu_status(), "NVML listed this experiment's processes without their memory");
  EXPECT_DOUBLE_EQ(r.gpu_util_mean_percent(), 30);

  f.gpu.reading.processes[1].used_bytes = 100 * kMiB;  // a later reading says it all
  v1::Sample later = WithProcesses({100, 101});
  f.sampler.Tick(2'000'000'000, true, &later);
  f.sampler.Fill(&r);
  EXPECT_EQ(r.peak_gpu_memory_bytes(), 400 * kMiB);
}

TEST(GpuSamplerTest, AbsentWithAReasonWhenNothingWasSeen) {
  {
    Fixture f;
    f.gpu.why = "no GPU: libnvidia-ml.so.1 (NVML) not found";
    v1::Sample s = WithProcesses({100});
    f.sampler.Tick(1, true, &s);
    EXPECT_EQ(s.gpus_size(), 0);
    EXPECT_FALSE(s.has_gpu_memory_bytes());
    EXPECT_FALSE(s.processes(0).has_gpu_memory_bytes());
    v1::Result r;
    f.sampler.Fill(&r);
    EXPECT_FALSE(r.has_peak_gpu_memory_bytes());
    EXPECT_FALSE(r.has_gpu_util_mean_percent());
    EXPECT_EQ(r.gpu_status(), f.gpu.why);
  }
  {
    Fixture f;  // NVML works, but the experiment never used a GPU (a CPU run on a GPU node)
    f.gpu.reading.devices = {Device(0, 99)};
    f.gpu.reading.processes = {{999, 0, kMiB, {}}};
    v1::Sample s = WithProcesses({100});
    f.sampler.Tick(1, true, &s);
    v1::Result r;
    f.sampler.Fill(&r);
    EXPECT_FALSE(r.has_peak_gpu_memory_bytes());
    EXPECT_FALSE(r.has_gpu_util_mean_percent());
    EXPECT_EQ(r.gpu_status(),
              "no process of this experiment appeared on a GPU in 1 NVML readings (1 other "
              "processes were listed; different pid namespace?)");
  }
  GpuSampler none(nullptr, [] { return uint64_t(0); });
  v1::Result r;
  none.Fill(&r);
  EXPECT_EQ(r.gpu_status(), "no GPU telemetry in this daemon");
}

// Why a device has no GPM is the device's: said though no reading fell while a worker trained
// (a loaded machine's budgeted readings missed a short training), not "no two readings".
TEST(GpuSamplerTest, ADevicesReasonForNoGpmHoldsThoughNoReadingFellInTraining) {
  Fixture f;
  GpuDevice d = Device(0, 50);
  d.gpm_status = "GPM: not supported on this GPU (compute capability 8.0)";
  f.gpu.reading.devices = {d};
  f.gpu.reading.processes = {{100, 0, kMiB, {}}};
  v1::Sample s = WithProcesses({100});
  f.sampler.Tick(1, /*training=*/false, &s);
  v1::Result r;
  f.sampler.Fill(&r);
  EXPECT_EQ(r.gpm_status(), d.gpm_status);
}

TEST(GpuSamplerTest, ReadingsWaitUntilTheirCostFitsTheBudget) {
  ScriptedGpu gpu;
  gpu.reading.devices = {Device(0, 10)};
  uint64_t cpu = 0;
  // Each reading costs 2 ms of CPU: at 1% of a core, one every 200 ms at most.
  GpuSampler sampler(
      &gpu, [&] { return cpu += 2'000'000; }, 0.01);
  for (uint64_t t = 0; t < 1'000'000'000; t += 50'000'000) {
    v1::Sample s;
    sampler.Tick(t, true, &s);
  }
  EXPECT_EQ(gpu.reads, 5);  // at 0, 200, 400, 600, 800 ms
  EXPECT_EQ(sampler.cpu_ns(), 5 * 2'000'000u);
}

TEST(NodeInfoTest, WorkerVersionSaysWhetherItsLibTorchHasCuda) {
  WorkerInfo cpu = ParseWorkerVersion(
      "libtorch 1.13.1\ncuda none: LibTorch 1.13.1 in shoal-worker was built without CUDA\n");
  EXPECT_EQ(cpu.torch_version, "1.13.1");
  EXPECT_EQ(cpu.cuda_devices, -1);
  EXPECT_EQ(cpu.cuda_why, "LibTorch 1.13.1 in shoal-worker was built without CUDA");
  WorkerInfo gpu = ParseWorkerVersion("libtorch 2.5.1\ncuda 8\n");
  EXPECT_EQ(gpu.cuda_devices, 8);
  EXPECT_EQ(ParseWorkerVersion("libtorch 1.13.1\n").cuda_why,
            "shoal-worker did not say whether its LibTorch has CUDA");

  GpuProbe no_nvml;
  no_nvml.status = "no GPU: libnvidia-ml.so.1 (NVML) not found";
  EXPECT_EQ(CudaMissing(no_nvml, cpu), no_nvml.status + "; " + cpu.cuda_why);
  GpuProbe h100;
  h100.available = true;
  EXPECT_EQ(CudaMissing(h100, cpu), "no CUDA: " + cpu.cuda_why);
  EXPECT_EQ(CudaMissing(h100, gpu), "");
  // LibTorch sees devices but NVML is not there (a container without it): experiments run, and
  // their GPU figures are absent with NVML's reason.
  EXPECT_EQ(CudaMissing(no_nvml, gpu), "");
}

// bfloat16 autocast runs where the CPU's flags name bfloat16 instructions, and is refused with
// the reason elsewhere.
TEST(NodeInfoTest, BfloatAutocastWantsTheCpusBfloatInstructions) {
  EXPECT_EQ(Bf16Missing("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n"),
            "");
  EXPECT_EQ(Bf16Missing("flags\t\t: fpu amx_bf16 amx_tile\n"), "");
  EXPECT_EQ(Bf16Missing("flags\t\t: fpu sse2 avx2 avx512f avx512_bf16x\n"),
            "its flags name neither avx512_bf16 nor amx_bf16");
  EXPECT_EQ(Bf16Missing("processor\t: 0\nBogoMIPS\t: 50.00\n"), "/proc/cpuinfo names no CPU flags");
}

}  // namespace
// A worker binary written as a script: the body runs under /bin/sh.
std::string WorkerScript(const std::string& dir, const std::string& body) {
  const std::string path = dir + "/shoal-worker";
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST(NodeInfoTest, AWorkerThatDoesNotAnswerIsKilledAndShoaldGoesOn) {
  testing::TempDir dir;
  // It starts a child of its own that would outlive it, then hangs.
  const std::string bin =
      WorkerScript(dir.path(), "sleep 60 & echo $! > " + dir.path() + "/child; echo $$ > " +
                                   dir.path() + "/pid; echo 'libtorch 9.9'; exec sleep 60");
  const uint64_t t0 = MonotonicNs();
  const WorkerInfo w = QueryWorker(bin, 300);
  EXPECT_LT(MonotonicNs() - t0, 5'000'000'000u);
  EXPECT_EQ(w.torch_version,
            "unknown (" + bin + " --version did not answer within 300 ms; killed)");
  EXPECT_EQ(w.cuda_devices, -1);
  EXPECT_EQ(w.cuda_why, bin + " --version did not answer within 300 ms; killed");
  // Reaped (not a zombie of ours), and its child killed with it.
  const pid_t pid = std::stoi(ReadSmallFile(dir.path() + "/pid").value());
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  const pid_t child = std::stoi(ReadSmallFile(dir.path() + "/child").value());
  for (int i = 0; i < 100 && testing::ProcessAlive(child); ++i) ::usleep(20'000);
  EXPECT_FALSE(testing::ProcessAlive(child)) << "the worker's child outlived it";
}

TEST(NodeInfoTest, AWorkerThatFailsSaysHow) {
  testing::TempDir dir;
  const std::string bin = WorkerScript(dir.path(), "echo 'libtorch 9.9'; exit 3");
  EXPECT_EQ(QueryWorker(bin, 10'000).cuda_why,
            "cannot run " + bin + " --version: exited with code 3");
  const std::string missing = dir.path() + "/absent";
  EXPECT_EQ(QueryWorker(missing, 10'000).torch_version.rfind("unknown (cannot run " + missing, 0),
            0u);
  const std::string good = WorkerScript(dir.path(), "echo 'libtorch 9.9'; echo 'cuda 2'");
  const WorkerInfo w = QueryWorker(good, 10'000);
  EXPECT_EQ(w.torch_version, "9.9");
  EXPECT_EQ(w.cuda_devices, 2);
}

}  // namespace shoal
