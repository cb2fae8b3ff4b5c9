#include "shared/cuda_weights.h"

#include <cstring>
#include <string>

namespace shoal {

std::string ExportProblem(const CudaWeightsExport& x, uint64_t segment_bytes, pid_t self) {
  if (x.exported != 1) return "the leader has not exported the weights' device buffer";
  if (x.bytes != segment_bytes)
    return "the exported device buffer holds " + std::to_string(x.bytes) +
           " bytes, the weights segment " + std::to_string(segment_bytes);
  if (x.owner_pid == self)
    return "a process cannot open its own CUDA IPC export (the leader must not train)";
  if (x.device < 0) return "the export names no device";
  return "";
}

StatusOr<std::unique_ptr<DeviceWeightsOwner>> DeviceWeightsOwner::Create(CudaDriver* cuda,
                                                                         int device,
                                                                         const void* host,
                                                                         uint64_t bytes, pid_t self,
                                                                         CudaWeightsExport* out) {
  std::memset(out, 0, sizeof *out);
  ASSIGN_OR_RETURN(DevicePtr base, cuda->Alloc(bytes));
  // Owned from here: any failure below frees it.
  std::unique_ptr<DeviceWeightsOwner> owner(new DeviceWeightsOwner(cuda, base, bytes));
  RETURN_IF_ERROR(cuda->CopyToDevice(base, host, bytes));
  ASSIGN_OR_RETURN(IpcHandle h, cuda->Export(base));
  out->device = device;
  out->owner_pid = self;
  out->bytes = bytes;
  out->handle = h;
  out->exported = 1;  // before any worker starts: they read it after
  return owner;
}

DeviceWeightsOwner::~DeviceWeightsOwner() { (void)cuda_->Free(base_); }

Status DeviceWeightsOwner::Download(void* host) {
  RETURN_IF_ERROR(cuda_->Synchronize());
  return cuda_->CopyToHost(host, base_, bytes_);
}

StatusOr<std::unique_ptr<DeviceWeightsView>> DeviceWeightsView::Open(CudaDriver* cuda,
                                                                     const CudaWeightsExport& x,
                                                                     uint64_t segment_bytes,
                                                                     pid_t self) {
  if (std::string why = ExportProblem(x, segment_bytes, self); !why.empty())
    return FailedPrecondition("shared CUDA weights: " + why);
  ASSIGN_OR_RETURN(DevicePtr base, cuda->Open(x.handle));
  return std::unique_ptr<DeviceWeightsView>(new DeviceWeightsView(cuda, base));
}

DeviceWeightsView::~DeviceWeightsView() { (void)cuda_->Close(base_); }

}  // namespace shoal
