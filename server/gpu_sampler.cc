#include "server/gpu_sampler.h"

#include <algorithm>

namespace shoal {

GpuSampler::GpuSampler(GpuMonitor* monitor, CpuClock cpu_clock, double budget_fraction)
    : monitor_(monitor), cpu_clock_(std::move(cpu_clock)), budget_fraction_(budget_fraction) {
  if (monitor_ == nullptr) why_ = "no GPU telemetry in this daemon";
}

void GpuSampler::Tick(uint64_t now_ns, bool training, v1::Sample* s) {
  if (monitor_ == nullptr || now_ns < next_read_ns_) return;
  const uint64_t before = cpu_clock_();
  auto reading = monitor_->Read();
  const uint64_t cost = cpu_clock_() - before;
  cpu_ns_ += cost;
  // The next reading waits until this one's cost is within the budget again.
  next_read_ns_ = now_ns + uint64_t(double(cost) / budget_fraction_);
  if (!reading.ok()) {
    why_ = reading.status().message();
    return;
  }
  ++reads_;
  Match(*reading, training, s);
  AddActivity(*reading, now_ns, training);
}

// GPM and energy of every device while a worker trains (Fill keeps the experiment's devices').
void GpuSampler::AddActivity(const GpuReading& r, uint64_t now_ns, bool training) {
  // Why a device has no GPM is the device's, whenever it was read: a run whose training no
  // budgeted reading fell in (a loaded machine) said "no two readings" of a GPU without GPM.
  for (const auto& d : r.devices)
    if (!d.gpm_status.empty()) gpm_why_ = d.gpm_status;
  if (!training) return;
  for (const auto& d : r.devices) {
    if (d.sm_active && d.sm_occupancy && d.tensor_active && d.dram_bw) {
      Activity& a = activity_[d.index];
      const double v[4] = {*d.sm_active, *d.sm_occupancy, *d.tensor_active, *d.dram_bw};
      for (int k = 0; k < 4; ++k) a.sum[k] += v[k];
      ++a.n;
    }
    if (d.energy_mj) energy_[d.index].Add(now_ns, {*d.energy_mj}, {0});
  }
}

v1::GpuDeviceSample DeviceSample(const GpuDevice& d) {
  v1::GpuDeviceSample g;
  g.set_index(d.index);
  if (d.memory_used) g.set_memory_used_bytes(*d.memory_used);
  if (d.memory_total) g.set_memory_total_bytes(*d.memory_total);
  if (d.util_percent) g.set_util_percent(*d.util_percent);
  if (d.power_mw) g.set_power_mw(*d.power_mw);
  if (d.energy_mj) g.set_energy_mj(*d.energy_mj);
  if (d.sm_active) g.set_sm_active_percent(*d.sm_active);
  if (d.sm_occupancy) g.set_sm_occupancy_percent(*d.sm_occupancy);
  if (d.tensor_active) g.set_tensor_active_percent(*d.tensor_active);
  if (d.dram_bw) g.set_dram_bw_percent(*d.dram_bw);
  return g;
}

void GpuSampler::Match(const GpuReading& r, bool training, v1::Sample* s) {
  for (const auto& d : r.devices) *s->add_gpus() = DeviceSample(d);
  uint64_t sum = 0;
  size_t matched = 0;
  bool sum_known = true;
  for (auto& p : *s->mutable_processes()) {
    uint64_t bytes = 0;
    bool on_gpu = false, known = true;
    for (const auto& q : r.processes) {
      if (q.pid != p.pid()) continue;
      on_gpu = true;
      devices_.insert(q.device);
      known = known && q.used_bytes.has_value();  // listed without a figure: unknown, not 0
      bytes += q.used_bytes.value_or(0);
      if (q.sm_percent) p.set_gpu_util_percent(p.gpu_util_percent() + *q.sm_percent);
    }
    if (on_gpu) ++matched;
    sum_known = sum_known && known;
    if (!known) continue;
    p.set_gpu_memory_bytes(bytes);  // NVML was read: a process it does not list holds none
    sum += bytes;
    if (on_gpu) peak_[p.pid()] = std::max(peak_[p.pid()], bytes);
  }
  foreign_ = r.processes.size() - std::min(r.processes.size(), matched);
  for (const auto& p : s->processes()) ours_ever_.insert(p.pid());
  for (const auto& q : r.processes)
    if (devices_.count(q.device)) foreign_on_devices_.insert(q.pid);
  seen_any_ = seen_any_ || matched > 0;
  AddUtilisation(r, training);
  if (!sum_known) return;  // this reading has no sum to peak
  s->set_gpu_memory_bytes(sum);
  if (seen_any_) peak_sum_ = std::max(peak_sum_.value_or(0), sum);
}

// The devices' utilisation while the experiment trains, for its mean and peak.
void GpuSampler::AddUtilisation(const GpuReading& r, bool training) {
  if (!training) return;
  for (const auto& d : r.devices) {
    if (!d.util_percent) continue;
    Util& u = util_[d.index];
    u.sum += *d.util_percent;
    u.peak = std::max(u.peak, double(*d.util_percent));
    ++u.n;
  }
}

void GpuSampler::Fill(v1::Result* r) const {
  r->set_gpu_reads(reads_);
  if (!seen_any_) {
    if (reads_ == 0)
      r->set_gpu_status(why_.empty() ? "no NVML reading was taken" : why_);
    else
      r->set_gpu_status("no process of this experiment appeared on a GPU in " +
                        std::to_string(reads_) + " NVML readings (" + std::to_string(foreign_) +
                        " other processes were listed; different pid namespace?)");
    return;
  }
  if (peak_sum_)
    r->set_peak_gpu_memory_bytes(*peak_sum_);
  else
    r->set_gpu_status("NVML listed this experiment's processes without their memory");
  double sum = 0, peak = 0;
  uint64_t n = 0;
  for (uint32_t d : devices_) {
    auto it = util_.find(d);
    if (it == util_.end()) continue;
    sum += it->second.sum;
    n += it->second.n;
    peak = std::max(peak, it->second.peak);
  }
  FillActivity(r);
  FillEnergy(r);
  if (n == 0) return;  // no reading while a worker trained: utilisation unknown
  r->set_gpu_util_mean_percent(sum / double(n));
  r->set_gpu_util_peak_percent(peak);
}

void GpuSampler::FillActivity(v1::Result* r) const {
  double sum[4] = {0, 0, 0, 0};
  uint64_t n = 0;
  for (uint32_t d : devices_) {
    auto it = activity_.find(d);
    if (it == activity_.end()) continue;
    for (int k = 0; k < 4; ++k) sum[k] += it->second.sum[k];
    n += it->second.n;
  }
  if (n == 0) {
    r->set_gpm_status(!gpm_why_.empty() ? gpm_why_ : "GPM: no two readings while a worker trained");
    return;
  }
  r->set_gpu_sm_active_percent(sum[0] / double(n));
  r->set_gpu_sm_occupancy_percent(sum[1] / double(n));
  r->set_gpu_tensor_active_percent(sum[2] / double(n));
  r->set_gpu_dram_bw_percent(sum[3] / double(n));
}

// Its devices' energy summed; absent, saying why, unless every one of them has a figure.
void GpuSampler::FillEnergy(v1::Result* r) const {
  double joules = 0, watts = 0;
  std::string why;
  for (uint32_t d : devices_) {
    auto it = energy_.find(d);
    const EnergyWindow::Figures f =
        it == energy_.end() ? EnergyWindow::Figures{{}, {}, "NVML gave no energy reading"}
                            : it->second.Result(1e-3);
    if (!f.joules) {
      why = "GPU " + std::to_string(d) + ": " + f.why;
      break;
    }
    joules += *f.joules;
    watts += *f.watts;
  }
  if (!why.empty()) {
    r->set_gpu_energy_status(why);
    return;
  }
  r->set_gpu_energy_j(joules);
  r->set_gpu_power_mean_w(watts);
  if (r->has_samples_per_sec() && r->samples_per_sec() > 0)
    r->set_gpu_joules_per_sample(watts / r->samples_per_sec());
}

std::set<pid_t> GpuSampler::foreign_on_devices() const {
  std::set<pid_t> out;
  for (pid_t p : foreign_on_devices_)
    if (!ours_ever_.count(p)) out.insert(p);
  return out;
}

std::optional<uint64_t> GpuSampler::PeakOf(pid_t pid) const {
  auto it = peak_.find(pid);
  if (it == peak_.end()) return std::nullopt;
  return it->second;
}

}  // namespace shoal
