// The part of NVML's C ABI Shoal uses, declared here so no NVML header is needed to build: the
// loader (server/gpu_monitor.cc) and the tests' stand-in library (tests/fake_nvml) both use these.
// Layouts as in nvml.h: nvmlMemory_t, nvmlUtilization_t, nvmlProcessInfo_v2_t (which the _v2 and
// _v3 process queries both fill) and nvmlProcessUtilizationSample_t.
#pragma once

namespace shoal::nvml {

using Ret = int;    // nvmlReturn_t
using Dev = void*;  // nvmlDevice_t
constexpr Ret kSuccess = 0, kInvalidArgument = 2, kInsufficientSize = 7;
constexpr unsigned long long kValueNotAvailable = ~0ull;  // NVML_VALUE_NOT_AVAILABLE

struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned int gpu, memory;
};
struct ProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};
struct ProcessUtil {
  unsigned int pid;
  unsigned long long time_stamp;
  unsigned int sm_util, mem_util, enc_util, dec_util;
};

// GPU Performance Monitoring (Hopper and newer): two samples of a device's counters, and the
// metrics between them. nvmlGpmMetricsGet_t ends in an array NVML only reads `num_metrics` of,
// so a shorter one than the header's NVML_GPM_METRIC_MAX is safe.
using GpmSample = void*;  // nvmlGpmSample_t
constexpr unsigned kGpmSupportVersion = 1, kGpmMetricsGetVersion = 1;
constexpr unsigned kGpmSmUtil = 2, kGpmSmOccupancy = 3, kGpmAnyTensorUtil = 5, kGpmDramBwUtil = 10;
struct GpmSupport {
  unsigned int version, is_supported_device;
};
struct GpmMetric {
  unsigned int metric_id;
  Ret nvml_return;
  double value;
  struct {
    char *short_name, *long_name, *unit;
  } info;
};
constexpr int kGpmMetricsAsked = 4;
struct GpmMetricsGet {
  unsigned int version, num_metrics;
  GpmSample sample1, sample2;
  GpmMetric metrics[kGpmMetricsAsked];
};

}  // namespace shoal::nvml
