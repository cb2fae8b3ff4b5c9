#include "shared/gpu/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#ifdef SHOAL_HAVE_CUDA
#include <cuda.h>
#endif

namespace shoal {
namespace {

// Declared here so the build needs no CUDA header; checked against cuda.h where there is one.
using CuResult = int;
using CuDevice = int;
using CuContext = void*;
constexpr unsigned kLazyEnablePeerAccess = 1;  // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS

#ifdef SHOAL_HAVE_CUDA
static_assert(sizeof(IpcHandle) == sizeof(CUipcMemHandle), "CUipcMemHandle is 64 bytes");
static_assert(sizeof(DevicePtr) == sizeof(CUdeviceptr), "CUdeviceptr is 64-bit");
static_assert(kLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, "flag value");
static_assert(CUDA_SUCCESS == 0, "CUDA_SUCCESS is 0");
static_assert(sizeof(CudaEvent) == sizeof(CUevent), "CUevent is a pointer");
#endif

struct Api {
  CuResult (*init)(unsigned);
  CuResult (*device_get)(CuDevice*, int);
  CuResult (*retain)(CuContext*, CuDevice);
  CuResult (*set_current)(CuContext);
  CuResult (*push)(CuContext);
  CuResult (*pop)(CuContext*);
  CuResult (*alloc)(DevicePtr*, size_t);
  CuResult (*free)(DevicePtr);
  CuResult (*htod)(DevicePtr, const void*, size_t);
  CuResult (*dtoh)(void*, DevicePtr, size_t);
  CuResult (*ipc_get)(IpcHandle*, DevicePtr);
  CuResult (*ipc_open)(DevicePtr*, IpcHandle, unsigned);
  CuResult (*ipc_close)(DevicePtr);
  CuResult (*synchronize)();
  CuResult (*error_string)(CuResult, const char**);
  CuResult (*event_create)(CudaEvent*, unsigned);
  CuResult (*event_record)(CudaEvent, void*);
  CuResult (*event_synchronize)(CudaEvent);
  CuResult (*event_elapsed)(float*, CudaEvent, CudaEvent);
  CuResult (*event_destroy)(CudaEvent);
};

template <typename F>
bool Bind(void* lib, const char* symbol, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, symbol));
  return *out != nullptr;
}

bool BindApi(void* lib, Api* a) {
  // The _v2 names are the 64-bit entry points cuda.h maps the plain names to.
  return Bind(lib, "cuInit", &a->init) && Bind(lib, "cuDeviceGet", &a->device_get) &&
         Bind(lib, "cuDevicePrimaryCtxRetain", &a->retain) &&
         Bind(lib, "cuCtxSetCurrent", &a->set_current) &&
         Bind(lib, "cuCtxPushCurrent_v2", &a->push) && Bind(lib, "cuCtxPopCurrent_v2", &a->pop) &&
         Bind(lib, "cuMemAlloc_v2", &a->alloc) && Bind(lib, "cuMemFree_v2", &a->free) &&
         Bind(lib, "cuMemcpyHtoD_v2", &a->htod) && Bind(lib, "cuMemcpyDtoH_v2", &a->dtoh) &&
         Bind(lib, "cuIpcGetMemHandle", &a->ipc_get) &&
         Bind(lib, "cuIpcOpenMemHandle_v2", &a->ipc_open) &&
         Bind(lib, "cuIpcCloseMemHandle", &a->ipc_close) &&
         Bind(lib, "cuCtxSynchronize", &a->synchronize) &&
         Bind(lib, "cuGetErrorString", &a->error_string) &&
         Bind(lib, "cuEventCreate", &a->event_create) &&
         // The legacy default stream's (not cuEventRecord_ptsz): LibTorch's default stream.
         Bind(lib, "cuEventRecord", &a->event_record) &&
         Bind(lib, "cuEventSynchronize", &a->event_synchronize) &&
         // CUDA 12.8 added _v2 (cuda.h maps the plain name to it from 13); older drivers have
         // only the first.
         (Bind(lib, "cuEventElapsedTime_v2", &a->event_elapsed) ||
          Bind(lib, "cuEventElapsedTime", &a->event_elapsed)) &&
         Bind(lib, "cuEventDestroy_v2", &a->event_destroy);
}

class RealDriver final : public CudaDriver {
 public:
  explicit RealDriver(const std::string& path) {
    lib_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_ == nullptr)
      why_ = "no CUDA driver: " + path + " not found";
    else if (!BindApi(lib_, &api_))
      why_ = "no CUDA driver: " + path + " lacks the entry points Shoal needs";
  }
  ~RealDriver() override {
    if (lib_ != nullptr) dlclose(lib_);
  }

  Status Init(int ordinal) override {
    if (!why_.empty()) return FailedPrecondition(why_);
    RETURN_IF_ERROR(Check(api_.init(0), "cuInit"));
    CuDevice dev = 0;
    RETURN_IF_ERROR(Check(api_.device_get(&dev, ordinal), "cuDeviceGet"));
    CuContext ctx = nullptr;
    RETURN_IF_ERROR(Check(api_.retain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
    RETURN_IF_ERROR(Check(api_.set_current(ctx), "cuCtxSetCurrent"));
    ordinal_ = ordinal;
    return Status::Ok();
  }
  StatusOr<DevicePtr> Alloc(uint64_t bytes) override {
    DevicePtr p = 0;
    RETURN_IF_ERROR(Ready());
    RETURN_IF_ERROR(Check(api_.alloc(&p, bytes), "cuMemAlloc"));
    return p;
  }
  Status Free(DevicePtr p) override {
    RETURN_IF_ERROR(Ready());
    return Check(api_.free(p), "cuMemFree");
  }
  Status CopyToDevice(DevicePtr dst, const void* src, uint64_t bytes) override {
    RETURN_IF_ERROR(Ready());
    return Check(api_.htod(dst, src, bytes), "cuMemcpyHtoD");
  }
  Status CopyToHost(void* dst, DevicePtr src, uint64_t bytes) override {
    RETURN_IF_ERROR(Ready());
    return Check(api_.dtoh(dst, src, bytes), "cuMemcpyDtoH");
  }
  StatusOr<IpcHandle> Export(DevicePtr p) override {
    IpcHandle h{};
    RETURN_IF_ERROR(Ready());
    RETURN_IF_ERROR(Check(api_.ipc_get(&h, p), "cuIpcGetMemHandle"));
    return h;
  }
  StatusOr<DevicePtr> Open(const IpcHandle& h, int device) override {
    DevicePtr p = 0;
    RETURN_IF_ERROR(InContextOf(device, [&] {
      return Check(api_.ipc_open(&p, h, kLazyEnablePeerAccess), "cuIpcOpenMemHandle");
    }));
    return p;
  }
  Status Close(DevicePtr p, int device) override {
    return InContextOf(device, [&] { return Check(api_.ipc_close(p), "cuIpcCloseMemHandle"); });
  }
  Status Synchronize() override {
    RETURN_IF_ERROR(Ready());
    return Check(api_.synchronize(), "cuCtxSynchronize");
  }
  StatusOr<CudaEvent> CreateEvent() override {
    CudaEvent e = nullptr;
    RETURN_IF_ERROR(Ready());
    RETURN_IF_ERROR(Check(api_.event_create(&e, 0 /* CU_EVENT_DEFAULT: timed */), "cuEventCreate"));
    return e;
  }
  Status RecordEvent(CudaEvent e) override {
    RETURN_IF_ERROR(Ready());
    return Check(api_.event_record(e, nullptr), "cuEventRecord");
  }
  StatusOr<float> ElapsedMs(CudaEvent start, CudaEvent end) override {
    float ms = 0;
    RETURN_IF_ERROR(Ready());
    RETURN_IF_ERROR(Check(api_.event_synchronize(end), "cuEventSynchronize"));
    RETURN_IF_ERROR(Check(api_.event_elapsed(&ms, start, end), "cuEventElapsedTime"));
    return ms;
  }
  Status DestroyEvent(CudaEvent e) override {
    RETURN_IF_ERROR(Ready());
    return Check(api_.event_destroy(e), "cuEventDestroy");
  }

 private:
  Status Ready() const { return why_.empty() ? Status::Ok() : FailedPrecondition(why_); }
  // Runs `f` with device `device`'s primary context current (pushed, then popped), or as it is
  // when that is Init's device. The context stays retained: LibTorch uses it for the tensors
  // over the mapping, and the process ends with it.
  template <typename F>
  Status InContextOf(int device, F f) {
    RETURN_IF_ERROR(Ready());
    if (device == ordinal_) return f();
    CuDevice dev = 0;
    CuContext ctx = nullptr;
    RETURN_IF_ERROR(Check(api_.device_get(&dev, device), "cuDeviceGet"));
    RETURN_IF_ERROR(Check(api_.retain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
    RETURN_IF_ERROR(Check(api_.push(ctx), "cuCtxPushCurrent"));
    const Status st = f();
    CuContext popped = nullptr;
    const Status pop = Check(api_.pop(&popped), "cuCtxPopCurrent");
    return st.ok() ? pop : st;
  }
  Status Check(CuResult r, const char* what) const {
    if (r == 0) return Status::Ok();
    const char* text = nullptr;
    if (api_.error_string(r, &text) != 0 || text == nullptr) text = "unknown error";
    // Out of memory (2) is the user's to fix, not ours: say so plainly.
    return r == 2 ? ResourceExhausted(std::string("CUDA out of memory (") + what + ")")
                  : Internal(std::string(what) + ": CUDA error " + std::to_string(r) + ": " + text);
  }

  void* lib_ = nullptr;
  int ordinal_ = -1;  // Init's device, whose context is current
  Api api_{};
  std::string why_;
};

}  // namespace

std::unique_ptr<CudaDriver> LoadCudaDriver() {
  const char* env = std::getenv("SHOAL_CUDA_LIBRARY");
  return std::make_unique<RealDriver>(env != nullptr && *env != '\0' ? env : "libcuda.so.1");
}

}  // namespace shoal
