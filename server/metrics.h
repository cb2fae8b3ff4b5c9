// The Prometheus text exposition (format 0.0.4) of what shoald knows: experiments by state, the
// queue, and the running experiment's latest sample (per-process memory with experiment, kind,
// role and worker labels, throughput, the sampler's own cost). Pure: tested on made-up snapshots
// and, end to end, with prometheus_client's parser. Names follow Prometheus conventions (base
// units, _bytes, _total); docs/operations.md maps them to dcgm-exporter's for GPU nodes.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct MetricsSnapshot {
  std::map<v1::ExperimentState, uint64_t> experiments;  // by state, every record
  struct Running {
    std::string id, kind;
    std::string sweep, name;  // its sweep's id and its spec's name; empty when none
    v1::Sample sample;        // its latest
  };
  std::optional<Running> running;
  // The node, idle or not, as dcgm-exporter describes one between jobs: every GPU now (NVML; its
  // memory, utilisation, power, energy, GPM), /dev/shm, the forkserver, the build.
  struct Node {
    std::vector<v1::GpuDeviceSample> gpus;  // empty: no NVML reading
    std::optional<uint64_t> shm_free_bytes, shm_total_bytes;
    bool fork_server_up = false;
    std::optional<double> cpu_energy_joules;  // the CPU packages' RAPL counters, summed
    uint64_t fork_server_restarts = 0;
    std::map<std::string, std::string> build;  // label -> value (version, grpc, ...)
    // What dcgm-exporter's users filter by: every series carries `Hostname`; each GPU's its
    // `UUID`, `modelName` and `device` ("nvidia0"), where NVML names them.
    std::string hostname;
    struct GpuIdentity {
      std::string uuid, model;
    };
    std::map<uint32_t, GpuIdentity> gpu_identity;  // by index
  };
  Node node;
};

std::string RenderMetrics(const MetricsSnapshot& s);

}  // namespace shoal
