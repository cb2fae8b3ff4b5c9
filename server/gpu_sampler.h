// The GPU side of an experiment's telemetry: each tick, one NVML reading (through GpuMonitor)
// matched against the experiment's pids.
//
// Per process: the device memory NVML lists for its pid, summed over devices, and its SM share
// where NVML samples it. Per device: memory used and utilisation. The experiment's GPU memory is
// the sum over its processes; its devices are those any of its processes appeared on; its
// utilisation is those devices' utilisation over the ticks in which a worker was training (mean
// and peak). When no process of the experiment ever appeared, the figures stay absent and
// gpu_status says why.
//
// Cost: a reading is a few NVML calls. It is timed with the sampling thread's CPU clock and
// counted in the sampler's CPU; readings are skipped while their measured cost would exceed the
// budget (budget_fraction of one core), so the GPU side can never cost more than that.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "server/energy.h"
#include "server/gpu_monitor.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// A device's reading as a sample carries it (what NVML did not give stays absent).
v1::GpuDeviceSample DeviceSample(const GpuDevice& d);

class GpuSampler {
 public:
  using CpuClock = std::function<uint64_t()>;
  GpuSampler(GpuMonitor* monitor, CpuClock cpu_clock, double budget_fraction = 0.01);

  // Adds GPU figures to a tick's sample whose processes are already filled. `training`: some
  // worker is in its training phase (utilisation counts then).
  void Tick(uint64_t now_ns, bool training, v1::Sample* s);
  // Peak GPU memory and utilisation into the result, or gpu_status saying why there are none.
  void Fill(v1::Result* r) const;
  std::optional<uint64_t> PeakOf(pid_t pid) const;
  uint64_t cpu_ns() const { return cpu_ns_; }
  uint64_t reads() const { return reads_; }
  // Processes NVML listed on the experiment's devices that were never the experiment's (a worker
  // NVML lists before the runner has learnt its pid is not foreign).
  std::set<pid_t> foreign_on_devices() const;

 private:
  struct Util {
    double sum = 0, peak = 0;
    uint64_t n = 0;
  };
  void Match(const GpuReading& r, bool training, v1::Sample* s);
  void AddUtilisation(const GpuReading& r, bool training);
  void AddActivity(const GpuReading& r, uint64_t now_ns, bool training);
  void FillActivity(v1::Result* r) const;
  void FillEnergy(v1::Result* r) const;

  GpuMonitor* monitor_;
  CpuClock cpu_clock_;
  double budget_fraction_;
  uint64_t next_read_ns_ = 0, cpu_ns_ = 0, reads_ = 0;
  std::string why_;  // the latest reason there was no reading
  bool seen_any_ = false;
  std::optional<uint64_t> peak_sum_;
  std::map<pid_t, uint64_t> peak_;
  std::set<uint32_t> devices_;  // devices the experiment's processes appeared on
  std::set<pid_t> foreign_on_devices_, ours_ever_;
  // GPM sums over training readings, per device: SM active, occupancy, tensor, DRAM.
  struct Activity {
    double sum[4] = {0, 0, 0, 0};
    uint64_t n = 0;
  };
  std::map<uint32_t, Activity> activity_;
  std::string gpm_why_;                      // a device's reason GPM is absent
  std::map<uint32_t, EnergyWindow> energy_;  // per device, over training readings
  std::map<uint32_t, Util> util_;            // per device, over training ticks
  size_t foreign_ = 0;                       // processes of others seen at the latest reading
};

}  // namespace shoal
