// Energy over an experiment's training window: a counter (NVML's total energy of a GPU, in mJ;
// the kernel's powercap RAPL zones of the CPU packages, in µJ) read at the sampler's ticks while
// a worker trains, its increments between consecutive readings summed (a counter that wraps at
// its range is followed across the wrap). A window shorter than kMinEnergyWindowNs, or one in
// which the counter never moved, is refused as too short, not guessed: counters update at their
// own period (tens to hundreds of ms), and a difference over less than that is noise.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

constexpr uint64_t kMinEnergyWindowNs = 1'000'000'000ull;

class EnergyWindow {
 public:
  // One reading of every zone's counter (`ranges`: where each wraps to 0; 0 when it does not).
  void Add(uint64_t now_ns, const std::vector<uint64_t>& counters,
           const std::vector<uint64_t>& ranges);
  struct Figures {
    std::optional<double> joules, watts;  // both or neither
    std::string why;                      // when neither
  };
  // `joules_per_unit`: 1e-3 for mJ, 1e-6 for µJ.
  Figures Result(double joules_per_unit) const;

 private:
  std::optional<uint64_t> first_ns_, last_ns_;
  std::vector<uint64_t> last_;
  uint64_t sum_ = 0;
  bool went_back_ = false, mismatched_ = false;
};

// The CPU packages' energy counters (powercap's intel-rapl zones; AMD's too since Linux 5.8).
struct CpuEnergyReading {
  std::vector<uint64_t> energy_uj, range_uj;  // one per package zone
};

class CpuEnergy {
 public:
  virtual ~CpuEnergy() = default;
  // FailedPrecondition saying why (no zone, not readable) when there is none.
  virtual StatusOr<CpuEnergyReading> Read() = 0;
};

// The top-level zones under `root` (/sys/class/powercap): intel-rapl:0, intel-rapl:1, ...
std::unique_ptr<CpuEnergy> PowercapEnergy(const std::string& root = "/sys/class/powercap");

}  // namespace shoal
