#include "server/energy.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "shared/os/procfs.h"

namespace shoal {

void EnergyWindow::Add(uint64_t now_ns, const std::vector<uint64_t>& counters,
                       const std::vector<uint64_t>& ranges) {
  if (!first_ns_) first_ns_ = now_ns;
  if (last_ns_ && counters.size() != last_.size()) mismatched_ = true;
  for (size_t i = 0; last_ns_ && !mismatched_ && i < counters.size(); ++i) {
    const uint64_t range = i < ranges.size() ? ranges[i] : 0;
    if (counters[i] >= last_[i]) {
      sum_ += counters[i] - last_[i];
    } else if (range > last_[i]) {
      sum_ += range - last_[i] + counters[i];  // wrapped once
    } else {
      went_back_ = true;
    }
  }
  last_ns_ = now_ns;
  last_ = counters;
}

EnergyWindow::Figures EnergyWindow::Result(double joules_per_unit) const {
  Figures f;
  char buf[160];
  if (!first_ns_) {
    f.why = "no energy reading was taken while a worker trained";
  } else if (went_back_ || mismatched_) {
    f.why = went_back_ ? "the energy counter went back (the driver reloaded?)"
                       : "the energy zones changed during the run";
  } else if (*last_ns_ - *first_ns_ < kMinEnergyWindowNs) {
    std::snprintf(buf, sizeof buf,
                  "the training window read was %.2f s, shorter than %.0f s: too short to "
                  "difference the energy counter",
                  double(*last_ns_ - *first_ns_) / 1e9, double(kMinEnergyWindowNs) / 1e9);
    f.why = buf;
  } else if (sum_ == 0) {
    std::snprintf(buf, sizeof buf, "the energy counter did not move in %.2f s",
                  double(*last_ns_ - *first_ns_) / 1e9);
    f.why = buf;
  } else {
    f.joules = double(sum_) * joules_per_unit;
    f.watts = *f.joules / (double(*last_ns_ - *first_ns_) / 1e9);
  }
  return f;
}

namespace {

class Powercap : public CpuEnergy {
 public:
  explicit Powercap(std::string root) : root_(std::move(root)) {}
  StatusOr<CpuEnergyReading> Read() override {
    CpuEnergyReading r;
    for (const auto& zone : Zones()) {
      auto e = ReadSmallFile(root_ + "/" + zone + "/energy_uj");
      if (!e.ok())
        return FailedPrecondition("CPU energy: " + root_ + "/" + zone +
                                  "/energy_uj is not readable (" + e.status().message() +
                                  "; it is root's only since Linux 5.10)");
      auto range = ReadSmallFile(root_ + "/" + zone + "/max_energy_range_uj");
      r.energy_uj.push_back(std::strtoull(e->c_str(), nullptr, 10));
      r.range_uj.push_back(range.ok() ? std::strtoull(range->c_str(), nullptr, 10) : 0);
    }
    if (r.energy_uj.empty())
      return FailedPrecondition("CPU energy: no RAPL zone under " + root_ +
                                " (a virtual machine, or a CPU whose kernel driver exposes none)");
    return r;
  }

 private:
  // Package zones: "intel-rapl:N", not their sub-zones "intel-rapl:N:M".
  std::vector<std::string> Zones() const {
    std::vector<std::string> out;
    DIR* d = ::opendir(root_.c_str());
    while (const dirent* e = d ? ::readdir(d) : nullptr) {
      const std::string name = e->d_name;
      if (name.rfind("intel-rapl:", 0) == 0 && name.find(':', 11) == std::string::npos)
        out.push_back(name);
    }
    if (d) ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string root_;
};

}  // namespace

std::unique_ptr<CpuEnergy> PowercapEnergy(const std::string& root) {
  return std::make_unique<Powercap>(root);
}

}  // namespace shoal
