// The OS as shoald's core sees it: one bundle of seams, handed by main to the Coordinator and by
// the Coordinator to each experiment's runner (RunnerEnv::os). Tests pass fakes (tests/fakes.h);
// main passes the real ones.
#pragma once

#include "shared/os/os_seams.h"
#include "shared/os/procfs.h"

namespace shoal {

class GpuMonitor;
class MachineProcs;
class CpuEnergy;
class Slurm;
class RunCgroups;

struct DaemonSeams {
  ProcessControl* proc = nullptr;
  ChildWaiter* waiter = nullptr;  // the Coordinator's reaper reaps through it
  SegmentJanitor* segments = nullptr;
  Clock* clock = nullptr;
  ProcReader* procfs = nullptr;
  GpuMonitor* gpu = nullptr;        // NVML; null: no GPU telemetry
  MachineProcs* machine = nullptr;  // the disturbance meter's /proc; null: not measured
  CpuEnergy* cpu_energy = nullptr;  // powercap RAPL; null: CPU energy not measured
  Slurm* slurm = nullptr;           // sbatch, scontrol, scancel; null: no sweep goes to Slurm
  // A control group per run (run_cgroup.h); null: runs are held by their process group and
  // /proc, for `no_cgroup_why`.
  RunCgroups* cgroups = nullptr;
  const char* no_cgroup_why = "";
};

}  // namespace shoal
