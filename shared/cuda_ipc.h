// Hogwild weights on a GPU, shared between processes with CUDA IPC.
//
// The owner (the experiment's leader, which outlives every worker) allocates one device buffer
// laid out exactly like the weights segment, uploads the initial weights, and writes the
// buffer's IPC handle into the segment's header (CudaWeightsExport). Each worker opens the
// handle, wraps its slices as CUDA tensors, and trains in place: every update lands in the one
// buffer. Workers close their mapping when they end; the owner downloads the final weights (for
// the fingerprint) and frees the buffer last. Destructors undo whatever was done, so no export
// outlives the experiment on any path.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>

#include "shared/cuda_driver.h"
#include "shared/status.h"

namespace shoal {

// Lives in WeightsHeader: where a worker finds the device copy of the weights.
struct CudaWeightsExport {
  uint32_t exported;  // 1 once the handle below is valid
  int32_t device;     // ordinal the buffer lives on
  int32_t owner_pid;  // who allocated it (CUDA IPC cannot open a handle in its own process)
  uint32_t pad;
  uint64_t bytes;  // the buffer's size: the weights segment's total_bytes
  IpcHandle handle;
};

// Why a worker must not open this export ("" when it may): nothing exported, a size that is not
// the segment's, or the worker is the owner itself.
std::string ExportProblem(const CudaWeightsExport& x, uint64_t segment_bytes, pid_t self);

class DeviceWeightsOwner {
 public:
  // Allocates `bytes` on the driver's current device, uploads `host` and fills `out`.
  static StatusOr<std::unique_ptr<DeviceWeightsOwner>> Create(CudaDriver* cuda, int device,
                                                              const void* host, uint64_t bytes,
                                                              pid_t self, CudaWeightsExport* out);
  ~DeviceWeightsOwner();
  DeviceWeightsOwner(const DeviceWeightsOwner&) = delete;
  DeviceWeightsOwner& operator=(const DeviceWeightsOwner&) = delete;

  // The buffer as it is now, into `host` (the segment: the fingerprint reads it there).
  Status Download(void* host);
  DevicePtr base() const { return base_; }

 private:
  DeviceWeightsOwner(CudaDriver* cuda, DevicePtr base, uint64_t bytes)
      : cuda_(cuda), base_(base), bytes_(bytes) {}
  CudaDriver* cuda_;
  DevicePtr base_;
  uint64_t bytes_;
};

class DeviceWeightsView {
 public:
  static StatusOr<std::unique_ptr<DeviceWeightsView>> Open(CudaDriver* cuda,
                                                           const CudaWeightsExport& x,
                                                           uint64_t segment_bytes, pid_t self);
  ~DeviceWeightsView();
  DeviceWeightsView(const DeviceWeightsView&) = delete;
  DeviceWeightsView& operator=(const DeviceWeightsView&) = delete;
  DevicePtr base() const { return base_; }

 private:
  DeviceWeightsView(CudaDriver* cuda, DevicePtr base) : cuda_(cuda), base_(base) {}
  CudaDriver* cuda_;
  DevicePtr base_;
};

}  // namespace shoal
