// Whether the rest of the machine disturbed an experiment: the CPU that processes outside it used
// while it ran, and the GPU processes on its devices that were not its own.
//
// CPU: two readings, when the experiment starts and when it has ended. Each reads /proc/stat's
// busy time of every CPU (user + nice + system) and every process's own and reaped children's
// CPU time with its parent. Shoal's own time is that of shoald and every process descending from
// it (the leader, its workers and their children, the forkserver and its pool), each counted
// once: a live process's own time, and its reaped children's in its parent's cutime/cstime. What
// the machine spent beyond that is the outside's:
//   outside cores = (Δ machine busy - Δ Shoal's) / USER_HZ / the window's seconds.
// The processes outside Shoal that grew most between the two readings name what disturbed it.
// A run is disturbed when the outside used at least kDisturbedCores on average, or when a GPU
// process that is not its own appeared on one of its devices.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "shared/os/procfs.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

constexpr double kDisturbedCores = 0.5;  // the default of shoald --disturbed-cores

// The machine's processes and CPU time, in front of /proc so the meter runs on fakes.
class MachineProcs {
 public:
  virtual ~MachineProcs() = default;
  // /proc/stat's first line: user + nice + system of every CPU, in USER_HZ ticks.
  virtual std::optional<uint64_t> BusyTicks() = 0;
  virtual std::vector<pid_t> Pids() = 0;
  virtual std::optional<ProcStat> Stat(pid_t pid) = 0;
};

std::unique_ptr<MachineProcs> RealMachineProcs();

// /proc/stat's busy ticks of the aggregate "cpu" line.
std::optional<uint64_t> ParseBusyTicks(const std::string& proc_stat);

struct CpuSnapshot {
  uint64_t mono_ns = 0;
  std::optional<uint64_t> busy;
  std::map<pid_t, ProcStat> procs;
};

CpuSnapshot TakeCpuSnapshot(MachineProcs& m, uint64_t mono_ns);

// `root` and every process descending from it in the snapshot: Shoal's own when root is shoald.
std::set<pid_t> ProcessTree(const CpuSnapshot& s, pid_t root);

struct OutsideCpu {
  double cores = 0;  // mean over the window
  // The outside processes that used most, "name (pid N) 0.97": at most three, each at least
  // 1% of a core.
  std::vector<std::string> top;
};

// What processes outside `daemon`'s tree used between `a` and `b`; nullopt when /proc/stat could
// not be read at either end or the window is empty.
std::optional<OutsideCpu> OutsideOf(const CpuSnapshot& a, const CpuSnapshot& b, pid_t daemon,
                                    uint64_t ticks_per_sec);

// Sets result.disturbed, disturbance and outside_cpu_cores from the CPU figure (absent: unknown)
// and the GPU processes on the experiment's devices that were not its own; the run is disturbed
// from `threshold_cores` outside cores on.
void FillDisturbance(const std::optional<OutsideCpu>& cpu, const std::set<pid_t>& foreign_gpu,
                     double threshold_cores, v1::Result* r);

}  // namespace shoal
