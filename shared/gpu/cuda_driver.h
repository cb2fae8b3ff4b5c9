// The part of the CUDA driver API Shoal calls itself: device buffers, their IPC handles, copies
// and a context-wide synchronise. Loaded with dlopen("libcuda.so.1") ($SHOAL_CUDA_LIBRARY names
// another file), like NVML.
//
// Why the driver API and not cudart: the driver is the one library every CUDA node has, in the
// version the node's driver speaks; linking a cudart of our own would put a second runtime
// (this machine's CUDA 13) beside the one inside PyTorch's LibTorch on a GPU node, and the worker
// would need the toolkit to build. The driver's primary context is the one LibTorch's runtime
// uses, so a buffer allocated here and a tensor LibTorch makes live in the same context, and a
// CUipcMemHandle is the same 64 bytes as a cudaIpcMemHandle_t.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shared/status.h"

namespace shoal {

using DevicePtr = uint64_t;  // CUdeviceptr
using CudaEvent = void*;     // CUevent
struct IpcHandle {
  uint8_t bytes[64];  // CU_IPC_HANDLE_SIZE
};

class CudaDriver {
 public:
  virtual ~CudaDriver() = default;
  // cuInit, then device `ordinal`'s primary context, current on the calling thread. Call first.
  virtual Status Init(int ordinal) = 0;
  virtual StatusOr<DevicePtr> Alloc(uint64_t bytes) = 0;
  virtual Status Free(DevicePtr p) = 0;
  virtual Status CopyToDevice(DevicePtr dst, const void* src, uint64_t bytes) = 0;
  virtual Status CopyToHost(void* dst, DevicePtr src, uint64_t bytes) = 0;
  // The handle another process opens to map this allocation (whole allocation only).
  virtual StatusOr<IpcHandle> Export(DevicePtr p) = 0;
  // Maps another process's allocation, one on device `device`, in that device's primary context
  // (as PyTorch opens a CUDA IPC handle: under the owner's device, so no peer access is needed);
  // never one of this process's own.
  virtual StatusOr<DevicePtr> Open(const IpcHandle& h, int device) = 0;
  virtual Status Close(DevicePtr p, int device) = 0;
  // Waits for all work in the context, every stream: where a time is taken.
  virtual Status Synchronize() = 0;

  // Timing events on the context's legacy default stream, the one LibTorch's work goes to unless
  // a program picks another: recorded between a step's phases, read once the step is done, so
  // the phases are timed on the device without the host waiting for each. Not every fake has
  // them: FailedPrecondition by default.
  virtual StatusOr<CudaEvent> CreateEvent() { return FailedPrecondition("no CUDA events"); }
  virtual Status RecordEvent(CudaEvent) { return FailedPrecondition("no CUDA events"); }
  // Milliseconds from `start` to `end` as the device reached them; waits for `end` first.
  virtual StatusOr<float> ElapsedMs(CudaEvent /*start*/, CudaEvent /*end*/) {
    return FailedPrecondition("no CUDA events");
  }
  virtual Status DestroyEvent(CudaEvent) { return FailedPrecondition("no CUDA events"); }
};

// The real driver; every call fails with FailedPrecondition saying why when it cannot be loaded.
std::unique_ptr<CudaDriver> LoadCudaDriver();

}  // namespace shoal
