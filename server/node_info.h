// What `shoal node` shows: cores, memory, /dev/shm, GPUs, whether cuda experiments can run, and
// versions.
#pragma once

#include <cstdint>
#include <string>

#include "server/gpu_monitor.h"
#include "server/worker_version.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// "" when device cuda can run here (the worker's LibTorch sees a device); else what is missing,
// NVML's view and the worker's both. NVML missing alone does not stop a run: its GPU figures
// are then absent and say why.
std::string CudaMissing(const GpuProbe& gpus, const WorkerInfo& worker);

// "" when the CPU flags of /proc/cpuinfo's text name bfloat16 instructions (avx512_bf16,
// amx_bf16); else why bfloat16 autocast would be emulated here (SpecLimits::bf16_missing).
std::string Bf16Missing(const std::string& cpuinfo);
// The same for this machine's /proc/cpuinfo.
std::string Bf16MissingHere();

// The host an experiment records (Experiment.host): the node's identity from what `shoal node`
// shows, without its moment-to-moment figures (free memory, GPU use).
v1::Host HostOf(const v1::NodeInfoResponse& node);

v1::NodeInfoResponse CollectNodeInfo(const std::string& state_dir, uint32_t max_workers,
                                     const WorkerInfo& worker, GpuMonitor* gpu);

}  // namespace shoal
