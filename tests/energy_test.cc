// Energy over the training window (server/energy.h): increments summed across readings and
// across a counter's wrap, too-short and unmoving windows refused, a counter that goes back
// refused; the powercap reader on a made-up /sys/class/powercap. And the GPU sampler's GPM and
// energy figures on a scripted NVML.
#include "server/energy.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "server/gpu_sampler.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

constexpr uint64_t kS = 1'000'000'000ull;

TEST(EnergyTest, IncrementsAreSummedAcrossReadingsAndAcrossAWrap) {
  EnergyWindow w;
  w.Add(0, {1000}, {0});
  w.Add(kS, {151000}, {0});  // 150 J in mJ
  w.Add(2 * kS, {301000}, {0});
  auto f = w.Result(1e-3);
  ASSERT_TRUE(f.joules.has_value()) << f.why;
  EXPECT_DOUBLE_EQ(*f.joules, 300);
  EXPECT_DOUBLE_EQ(*f.watts, 150);
  // A RAPL counter wrapping at its range between two readings: 100 J before the wrap, 50 after.
  EnergyWindow rapl;
  rapl.Add(0, {900'000'000}, {1'000'000'000});
  rapl.Add(2 * kS, {50'000'000}, {1'000'000'000});
  f = rapl.Result(1e-6);
  ASSERT_TRUE(f.joules.has_value()) << f.why;
  EXPECT_DOUBLE_EQ(*f.joules, 150);
  EXPECT_DOUBLE_EQ(*f.watts, 75);
}

TEST(EnergyTest, TooShortUnmovingOrBackwardWindowsAreRefusedNotGuessed) {
  EnergyWindow none;
  EXPECT_EQ(none.Result(1e-3).why, "no energy reading was taken while a worker trained");
  EnergyWindow short_one;
  short_one.Add(0, {0}, {0});
  short_one.Add(kS / 2, {75000}, {0});
  auto f = short_one.Result(1e-3);
  EXPECT_FALSE(f.joules.has_value());
  EXPECT_EQ(f.why,
            "the training window read was 0.50 s, shorter than 1 s: too short to difference the "
            "energy counter");
  EnergyWindow still;
  still.Add(0, {5}, {0});
  still.Add(3 * kS, {5}, {0});
  EXPECT_EQ(still.Result(1e-3).why, "the energy counter did not move in 3.00 s");
  EnergyWindow back;  // a GPU counter has no range: going back is a reset, not a wrap
  back.Add(0, {5000}, {0});
  back.Add(2 * kS, {10}, {0});
  EXPECT_EQ(back.Result(1e-3).why, "the energy counter went back (the driver reloaded?)");
}

TEST(EnergyTest, PowercapReadsThePackageZonesOnly) {
  testing::TempDir d;
  for (const char* zone : {"intel-rapl:0", "intel-rapl:1", "intel-rapl:0:0"}) {
    const std::string dir = d / zone;
    ::mkdir(dir.c_str(), 0755);
    std::ofstream(dir + "/energy_uj") << (std::string(zone).size() > 12 ? "7\n" : "123456\n");
    std::ofstream(dir + "/max_energy_range_uj") << "262143328850\n";
  }
  auto r = PowercapEnergy(d / "")->Read();
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->energy_uj, (std::vector<uint64_t>{123456, 123456}));
  EXPECT_EQ(r->range_uj, (std::vector<uint64_t>{262143328850, 262143328850}));
  auto none = PowercapEnergy(d / "missing")->Read();
  EXPECT_FALSE(none.ok());
  EXPECT_EQ(none.status().message().rfind("CPU energy: no RAPL zone under ", 0), 0u);
}

class ScriptedNvml : public GpuMonitor {
 public:
  GpuProbe Probe() override { return {}; }
  StatusOr<GpuReading> Read() override { return reading; }
  GpuReading reading;
};

GpuReading OneDevice(std::optional<double> sm, uint64_t energy_mj, std::string gpm_why = "") {
  GpuReading r;
  GpuDevice d;
  d.index = 0;
  d.util_percent = 100;
  d.energy_mj = energy_mj;
  d.power_mw = 200000;
  if (sm) {
    d.sm_active = *sm;
    d.sm_occupancy = *sm / 2;
    d.tensor_active = 10;
    d.dram_bw = 40;
  }
  d.gpm_status = gpm_why;
  r.devices = {d};
  r.processes = {{100, 0, 1 << 20, {}}};
  return r;
}

v1::Sample Worker() {
  v1::Sample s;
  s.add_processes()->set_pid(100);
  return s;
}

TEST(EnergyTest, GpuSamplerAveragesGpmAndDifferencesEnergyOverTrainingReadings) {
  ScriptedNvml nvml;
  GpuSampler sampler(&nvml, [] { return uint64_t(0); });
  const std::pair<double, uint64_t> ticks[] = {{50, 1'000'000}, {70, 1'200'000}, {90, 1'400'000}};
  uint64_t t = kS;
  for (auto [sm, mj] : ticks) {
    nvml.reading = OneDevice(sm, mj);
    v1::Sample s = Worker();
    sampler.Tick(t, /*training=*/true, &s);
    EXPECT_DOUBLE_EQ(s.gpus(0).sm_active_percent(), sm);
    EXPECT_EQ(s.gpus(0).power_mw(), 200000u);
    t += kS;
  }
  nvml.reading = OneDevice(0, 9'000'000);  // after training: neither counts
  v1::Sample idle = Worker();
  sampler.Tick(t, false, &idle);
  v1::Result r;
  r.set_samples_per_sec(400);
  sampler.Fill(&r);
  EXPECT_DOUBLE_EQ(r.gpu_sm_active_percent(), 70);
  EXPECT_DOUBLE_EQ(r.gpu_sm_occupancy_percent(), 35);
  EXPECT_DOUBLE_EQ(r.gpu_tensor_active_percent(), 10);
  EXPECT_DOUBLE_EQ(r.gpu_dram_bw_percent(), 40);
  EXPECT_DOUBLE_EQ(r.gpu_energy_j(), 400);  // 400 000 mJ over 2 s
  EXPECT_DOUBLE_EQ(r.gpu_power_mean_w(), 200);
  EXPECT_DOUBLE_EQ(r.gpu_joules_per_sample(), 0.5);
  EXPECT_TRUE(r.gpm_status().empty());
}

TEST(EnergyTest, GpuSamplerSaysWhyGpmAndEnergyAreAbsent) {
  ScriptedNvml nvml;
  GpuSampler sampler(&nvml, [] { return uint64_t(0); });
  const std::string why =
      "GPM: not supported on this GPU (compute capability 8.0; GPM needs Hopper, 9.0, or newer)";
  nvml.reading = OneDevice(std::nullopt, 1000, why);
  v1::Sample s = Worker();
  sampler.Tick(kS, true, &s);
  nvml.reading = OneDevice(std::nullopt, 2000, why);
  s = Worker();
  sampler.Tick(kS + kS / 4, true, &s);
  v1::Result r;
  sampler.Fill(&r);
  EXPECT_FALSE(r.has_gpu_sm_active_percent());
  EXPECT_EQ(r.gpm_status(), why);
  EXPECT_FALSE(r.has_gpu_energy_j());
  EXPECT_EQ(r.gpu_energy_status(),
            "GPU 0: the training window read was 0.25 s, shorter than 1 s: too short to "
            "difference the energy counter");
}

}  // namespace
}  // namespace shoal
