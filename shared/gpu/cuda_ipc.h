// Device buffers shared between processes with CUDA IPC: Hogwild's weights on a GPU, and a
// pipeline's activation slots between CUDA stages.
//
// The owner allocates one device buffer, optionally uploads its initial contents, and writes the
// buffer's IPC handle into a CudaExport in shared memory (DeviceBufferOwner). Another process
// opens the handle and works on the buffer in place (DeviceBufferView). Views close their
// mapping when they end; the owner frees the buffer last (it must outlive every view: Hogwild's
// owner is the leader, which outlives its workers; a pipeline stage waits for every stage to
// finish). Destructors undo whatever was done, so no export outlives its experiment on any path.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "shared/gpu/cuda_driver.h"
#include "shared/status.h"

namespace shoal {

// Lives in shared memory (the weights header; a pipeline's rings segment): where another process
// finds a device buffer.
struct CudaExport {
  uint32_t exported;  // 1 once the handle below is valid
  int32_t device;     // ordinal the buffer lives on
  int32_t owner_pid;  // who allocated it (CUDA IPC cannot open a handle in its own process)
  uint32_t pad;
  uint64_t bytes;  // the buffer's size
  IpcHandle handle;
};

// Why `self` must not open this export ("" when it may): nothing exported, a size other than
// `expected_bytes`, or `self` is the owner itself.
std::string ExportProblem(const CudaExport& x, uint64_t expected_bytes, pid_t self);

class DeviceBufferOwner {
 public:
  // Allocates `bytes` on the driver's current device (`device`, Init's), uploads `host` (null:
  // nothing, the buffer's contents are undefined) and fills `out`.
  static StatusOr<std::unique_ptr<DeviceBufferOwner>> Create(CudaDriver* cuda, int device,
                                                             const void* host, uint64_t bytes,
                                                             pid_t self, CudaExport* out);
  ~DeviceBufferOwner();
  DeviceBufferOwner(const DeviceBufferOwner&) = delete;
  DeviceBufferOwner& operator=(const DeviceBufferOwner&) = delete;

  // The buffer as it is now, into `host` (Hogwild's fingerprint reads the weights segment).
  Status Download(void* host);
  DevicePtr base() const { return base_; }

 private:
  DeviceBufferOwner(CudaDriver* cuda, DevicePtr base, uint64_t bytes)
      : cuda_(cuda), base_(base), bytes_(bytes) {}
  CudaDriver* cuda_;
  DevicePtr base_;
  uint64_t bytes_;
};

class DeviceBufferView {
 public:
  // FAILED_PRECONDITION "<what>: <the ExportProblem>" when the export must not be opened.
  static StatusOr<std::unique_ptr<DeviceBufferView>> Open(CudaDriver* cuda, const CudaExport& x,
                                                          uint64_t expected_bytes, pid_t self,
                                                          const std::string& what);
  ~DeviceBufferView();
  DeviceBufferView(const DeviceBufferView&) = delete;
  DeviceBufferView& operator=(const DeviceBufferView&) = delete;
  DevicePtr base() const { return base_; }
  int device() const { return device_; }  // the owner's device, where the buffer lies

 private:
  DeviceBufferView(CudaDriver* cuda, DevicePtr base, int device)
      : cuda_(cuda), base_(base), device_(device) {}
  CudaDriver* cuda_;
  DevicePtr base_;
  int device_;
};

}  // namespace shoal
