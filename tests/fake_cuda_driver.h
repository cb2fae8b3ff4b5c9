// A CUDA driver for tests without a GPU: device memory is host memory, and handles name
// allocations by their address, so an "imported" buffer is the owner's very bytes. It records
// what was freed, opened and closed, and fails the step named in `fail`.
#pragma once

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "shared/gpu/cuda_driver.h"

namespace shoal {

class FakeDriver : public CudaDriver {
 public:
  Status Init(int ordinal) override {
    device = ordinal;
    return Status::Ok();
  }
  StatusOr<DevicePtr> Alloc(uint64_t bytes) override {
    if (fail == "alloc") return ResourceExhausted("CUDA out of memory (cuMemAlloc)");
    auto& buf = memory[next++];  // a map's nodes stay put: the address is stable
    buf.resize(bytes);
    return DevicePtr(reinterpret_cast<uintptr_t>(buf.data()));
  }
  Status Free(DevicePtr p) override {
    freed.insert(p);
    return Status::Ok();
  }
  Status CopyToDevice(DevicePtr dst, const void* src, uint64_t bytes) override {
    if (fail == "copy") return Internal("cuMemcpyHtoD: CUDA error 700");
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return Status::Ok();
  }
  Status CopyToHost(void* dst, DevicePtr src, uint64_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return Status::Ok();
  }
  StatusOr<IpcHandle> Export(DevicePtr p) override {
    if (fail == "export") return Internal("cuIpcGetMemHandle: CUDA error 1");
    IpcHandle h{};
    std::memcpy(h.bytes, &p, sizeof p);
    return h;
  }
  StatusOr<DevicePtr> Open(const IpcHandle& h, int on) override {
    DevicePtr p;
    std::memcpy(&p, h.bytes, sizeof p);
    opened.insert(p);
    opened_on[p] = on;
    return p;
  }
  Status Close(DevicePtr p, int on) override {
    closed.insert(p);
    closed_on[p] = on;
    return Status::Ok();
  }
  Status Synchronize() override {
    ++syncs;
    return Status::Ok();
  }

  std::map<int, std::vector<char>> memory;
  int next = 1;
  std::string fail;
  std::set<DevicePtr> freed, opened, closed;
  std::map<DevicePtr, int> opened_on, closed_on;  // the device each mapping was made under
  int device = -1;                                // Init's
  int syncs = 0;
};

}  // namespace shoal
