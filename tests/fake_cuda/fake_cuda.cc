// A stand-in for libcuda.so.1: the part of the driver API Shoal calls (shared/gpu/cuda_driver.cc),
// with device memory in host memory and one primary context per device, so that the real driver
// binding (dlopen, its entry points, the error mapping, and which context each call runs in) is
// tested on a machine without a GPU, as tests/fake_nvml does for NVML.
//
// Every call is logged with the device whose context is current ("alloc@1;"); the test reads the
// log through shoal_fake_cuda_log() in the copy the driver loaded.
//   SHOAL_FAKE_CUDA_DEVICES=N   devices (default 2); cuDeviceGet fails past them
//   SHOAL_FAKE_CUDA_FAIL=NAME   that entry point (cuMemAlloc, cuIpcOpenMemHandle, ...) fails:
//                               cuMemAlloc with 2 (out of memory), the others with 999
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using CuResult = int;
constexpr CuResult kOk = 0, kOutOfMemory = 2, kNotInitialized = 3, kInvalidDevice = 101,
                   kInvalidContext = 201, kUnknown = 999;

struct Context {
  int device;
};
Context contexts[16];
bool initialised = false;
std::string log_text;
thread_local std::vector<Context*> stack;  // the calling thread's contexts, current on top

int Devices() {
  const char* v = std::getenv("SHOAL_FAKE_CUDA_DEVICES");
  return v != nullptr ? std::atoi(v) : 2;
}

bool Fails(const char* name) {
  const char* v = std::getenv("SHOAL_FAKE_CUDA_FAIL");
  return v != nullptr && std::strcmp(v, name) == 0;
}

// Logs `what` at the current context's device; the result a call in a context gets.
CuResult InContext(const std::string& what, const char* name) {
  if (!initialised) return kNotInitialized;
  if (stack.empty()) return kInvalidContext;
  log_text += what + "@" + std::to_string(stack.back()->device) + ";";
  if (!Fails(name)) return kOk;
  return std::strcmp(name, "cuMemAlloc") == 0 ? kOutOfMemory : kUnknown;
}

}  // namespace

extern "C" {

const char* shoal_fake_cuda_log() { return log_text.c_str(); }

CuResult cuInit(unsigned) {
  initialised = true;
  log_text += "init;";
  return kOk;
}
CuResult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= Devices()) return kInvalidDevice;
  *dev = ordinal;
  return kOk;
}
CuResult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  log_text += "retain " + std::to_string(dev) + ";";
  *ctx = &contexts[dev];
  contexts[dev].device = dev;
  return kOk;
}
CuResult cuCtxSetCurrent(void* ctx) {
  if (stack.empty()) stack.push_back(nullptr);
  stack.back() = static_cast<Context*>(ctx);
  log_text += "set " + std::to_string(stack.back()->device) + ";";
  return kOk;
}
CuResult cuCtxPushCurrent_v2(void* ctx) {
  stack.push_back(static_cast<Context*>(ctx));
  log_text += "push " + std::to_string(stack.back()->device) + ";";
  return kOk;
}
CuResult cuCtxPopCurrent_v2(void** ctx) {
  if (stack.empty()) return kInvalidContext;
  log_text += "pop " + std::to_string(stack.back()->device) + ";";
  *ctx = stack.back();
  stack.pop_back();
  return kOk;
}
CuResult cuMemAlloc_v2(uint64_t* p, size_t bytes) {
  if (CuResult r = InContext("alloc", "cuMemAlloc"); r != kOk) return r;
  *p = reinterpret_cast<uintptr_t>(std::calloc(1, bytes));
  return kOk;
}
CuResult cuMemFree_v2(uint64_t p) {
  std::free(reinterpret_cast<void*>(p));
  return InContext("free", "cuMemFree");
}
CuResult cuMemcpyHtoD_v2(uint64_t dst, const void* src, size_t bytes) {
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return InContext("htod", "cuMemcpyHtoD");
}
CuResult cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t bytes) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return InContext("dtoh", "cuMemcpyDtoH");
}
CuResult cuIpcGetMemHandle(void* handle, uint64_t p) {
  std::memset(handle, 0, 64);
  std::memcpy(handle, &p, sizeof p);
  return InContext("export", "cuIpcGetMemHandle");
}
// CUipcMemHandle is a 64-byte struct passed by value.
struct Handle {
  char bytes[64];
};
CuResult cuIpcOpenMemHandle_v2(uint64_t* p, Handle h, unsigned flags) {
  std::memcpy(p, h.bytes, sizeof *p);
  return InContext(flags == 1 ? "open lazy" : "open", "cuIpcOpenMemHandle");
}
CuResult cuIpcCloseMemHandle(uint64_t) { return InContext("close", "cuIpcCloseMemHandle"); }
CuResult cuCtxSynchronize() { return InContext("sync", "cuCtxSynchronize"); }
// An event is the time it was recorded at: the fake's work is done when it is queued.
CuResult cuEventCreate(void** e, unsigned) {
  *e = new std::chrono::steady_clock::time_point();
  return InContext("event", "cuEventCreate");
}
CuResult cuEventRecord(void* e, void*) {
  *static_cast<std::chrono::steady_clock::time_point*>(e) = std::chrono::steady_clock::now();
  return InContext("record", "cuEventRecord");
}
CuResult cuEventSynchronize(void*) { return InContext("wait", "cuEventSynchronize"); }
CuResult cuEventElapsedTime_v2(float* ms, void* a, void* b) {
  using T = std::chrono::steady_clock::time_point;
  *ms = std::chrono::duration<float, std::milli>(*static_cast<T*>(b) - *static_cast<T*>(a)).count();
  return InContext("elapsed", "cuEventElapsedTime");
}
CuResult cuEventDestroy_v2(void* e) {
  delete static_cast<std::chrono::steady_clock::time_point*>(e);
  return InContext("destroy", "cuEventDestroy");
}
CuResult cuGetErrorString(CuResult r, const char** text) {
  *text = r == kOutOfMemory      ? "out of memory"
          : r == kInvalidDevice  ? "invalid device ordinal"
          : r == kInvalidContext ? "invalid device context"
                                 : "unknown error";
  return kOk;
}

}  // extern "C"
