#include "shared/gpu/cuda_ipc.h"

#include <cstring>
#include <string>

namespace shoal {

std::string ExportProblem(const CudaExport& x, uint64_t expected_bytes, pid_t self) {
  if (x.exported != 1) return "its owner has not exported the device buffer";
  if (x.bytes != expected_bytes)
    return "the exported device buffer holds " + std::to_string(x.bytes) + " bytes, " +
           std::to_string(expected_bytes) + " expected";
  if (x.owner_pid == self) return "a process cannot open its own CUDA IPC export";
  if (x.device < 0) return "the export names no device";
  return "";
}

StatusOr<std::unique_ptr<DeviceBufferOwner>> DeviceBufferOwner::Create(CudaDriver* cuda, int device,
                                                                       const void* host,
                                                                       uint64_t bytes, pid_t self,
                                                                       CudaExport* out) {
  std::memset(out, 0, sizeof *out);
  ASSIGN_OR_RETURN(DevicePtr base, cuda->Alloc(bytes));
  // Owned from here: any failure below frees it.
  std::unique_ptr<DeviceBufferOwner> owner(new DeviceBufferOwner(cuda, base, bytes));
  if (host != nullptr) RETURN_IF_ERROR(cuda->CopyToDevice(base, host, bytes));
  ASSIGN_OR_RETURN(IpcHandle h, cuda->Export(base));
  out->device = device;
  out->owner_pid = self;
  out->bytes = bytes;
  out->handle = h;
  out->exported = 1;  // before any worker starts: they read it after
  return owner;
}

DeviceBufferOwner::~DeviceBufferOwner() { (void)cuda_->Free(base_); }

Status DeviceBufferOwner::Download(void* host) {
  RETURN_IF_ERROR(cuda_->Synchronize());
  return cuda_->CopyToHost(host, base_, bytes_);
}

StatusOr<std::unique_ptr<DeviceBufferView>> DeviceBufferView::Open(CudaDriver* cuda,
                                                                   const CudaExport& x,
                                                                   uint64_t expected_bytes,
                                                                   pid_t self,
                                                                   const std::string& what) {
  if (std::string why = ExportProblem(x, expected_bytes, self); !why.empty())
    return FailedPrecondition(what + ": " + why);
  ASSIGN_OR_RETURN(DevicePtr base, cuda->Open(x.handle, x.device));
  return std::unique_ptr<DeviceBufferView>(new DeviceBufferView(cuda, base, x.device));
}

DeviceBufferView::~DeviceBufferView() { (void)cuda_->Close(base_, device_); }

}  // namespace shoal
