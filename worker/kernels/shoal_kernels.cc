#include "worker/kernels/shoal_kernels.h"

#include <ATen/ops/max_pool2d_with_indices_backward_cpu_dispatch.h>
#include <ATen/ops/max_pool2d_with_indices_cpu_dispatch.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "worker/kernels/max_pool_codes.h"

namespace shoal {
namespace {

using kernels::PoolShape;

std::atomic<uint64_t> g_calls{0};

// Both entries of an int[2] argument (ATen accepts one value for both).
bool Both(at::IntArrayRef v, int64_t want) {
  return (v.size() == 1 || v.size() == 2) && v.front() == want && v.back() == want;
}

// The window of a pooling the fast path takes, or 0: square, stride = kernel, no padding or
// dilation, floor mode, a non-empty contiguous float NCHW input at least one window large.
int64_t FastWindow(const at::Tensor& self, at::IntArrayRef kernel, at::IntArrayRef stride,
                   at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode) {
  if (kernel.empty() || kernel.size() > 2) return 0;
  const int64_t k = kernel.front();
  if (k < 1 || k > 16 || !Both(kernel, k)) return 0;
  if (!(stride.empty() || Both(stride, k)) || !Both(padding, 0) || !Both(dilation, 1)) return 0;
  if (ceil_mode || !self.device().is_cpu() || self.layout() != at::kStrided) return 0;
  if (self.scalar_type() != at::kFloat || self.dim() != 4 || self.numel() == 0) return 0;
  if (self.has_names()) return 0;  // LibTorch's kernel carries the names over
  if (!self.is_contiguous() || self.suggest_memory_format() != at::MemoryFormat::Contiguous)
    return 0;
  return self.size(2) >= k && self.size(3) >= k ? k : 0;
}

PoolShape ShapeOf(const at::Tensor& self, int64_t k) {
  return kernels::ShapeOf(self.size(0) * self.size(1), self.size(2), self.size(3), k);
}

// Where each code (kh * k + kw) of a window at the plane's origin is, as ATen indexes a plane.
std::vector<int64_t> CodeOffsets(const PoolShape& s) {
  std::vector<int64_t> at(size_t(s.k * s.k));
  for (int64_t c = 0; c < s.k * s.k; ++c) at[size_t(c)] = (c / s.k) * s.w + c % s.k;
  return at;
}

// One output row's codes as ATen's indices; `row` indexes the row's first window.
void CodesToIndicesRow(const PoolShape& s, const int64_t* offsets, int64_t row, const uint8_t* code,
                       int64_t* index) {
  // In locals: a store through `index` could otherwise change s's fields, so they would be
  // read again at every element.
  const int64_t n = s.ow, w = s.w, k = s.k;
  if (k == 2) {  // no table
    for (int64_t ow = 0; ow < n; ++ow)
      index[ow] = row + 2 * ow + int64_t(code[ow] >> 1) * w + (code[ow] & 1);
    return;
  }
  for (int64_t ow = 0; ow < n; ++ow) index[ow] = row + ow * k + offsets[code[ow]];
}

// One output row's indices as codes; false when one lies outside its own window (ATen's
// backward takes any index of the plane: such a call goes to its kernel).
bool IndicesToCodesRow(const PoolShape& s, int64_t row, const int64_t* index, uint8_t* code) {
  const int64_t n = s.ow, w = s.w;  // locals: a byte stored through `code` may alias s
  if (s.k == 2) {
    // d is 0, 1, w or w + 1 (w >= 2). In unsigned arithmetic, without a branch (the maxima land
    // anywhere in their windows: a branch mispredicts half the time): kh is 1 when d >= w, and
    // any d outside the window leaves kw > 1.
    const uint64_t uw = uint64_t(w);
    uint64_t outside = 0;
    for (int64_t ow = 0; ow < n; ++ow) {
      const uint64_t d = uint64_t(index[ow]) - uint64_t(row + 2 * ow);
      const uint64_t kh = (uw - 1 - d) >> 63;
      const uint64_t kw = d - ((0 - kh) & uw);
      outside |= kw >> 1;
      code[ow] = uint8_t(2 * kh + kw);
    }
    return outside == 0;
  }
  bool inside = true;
  for (int64_t ow = 0; ow < s.ow; ++ow) {
    const auto d = int64_t(uint64_t(index[ow]) - uint64_t(row + ow * s.k));  // wraps, never UB
    int64_t c = -1;
    for (int64_t kh = 0; kh < s.k && c < 0; ++kh)
      if (d >= kh * s.w && d < kh * s.w + s.k) c = kh * s.k + (d - kh * s.w);
    inside &= c >= 0;
    code[ow] = uint8_t(c < 0 ? 0 : c);
  }
  return inside;
}

void CodesToIndices(const PoolShape& s, const std::vector<int64_t>& offsets, const uint8_t* code,
                    int64_t* index) {
  for (int64_t oh = 0; oh < s.oh; ++oh)
    CodesToIndicesRow(s, offsets.data(), oh * s.k * s.w, code + oh * s.ow, index + oh * s.ow);
}

bool IndicesToCodes(const PoolShape& s, const int64_t* index, uint8_t* code) {
  bool inside = true;
  for (int64_t oh = 0; oh < s.oh; ++oh)
    inside &= IndicesToCodesRow(s, oh * s.k * s.w, index + oh * s.ow, code + oh * s.ow);
  return inside;
}

std::tuple<at::Tensor, at::Tensor> PoolFast(const at::Tensor& self, int64_t k) {
  const PoolShape s = ShapeOf(self, k);
  at::Tensor out = at::empty({self.size(0), self.size(1), s.oh, s.ow}, self.options());
  at::Tensor indices = at::empty(out.sizes(), self.options().dtype(at::kLong));
  const std::vector<int64_t> offsets = CodeOffsets(s);
  const float* in = self.data_ptr<float>();
  float* o = out.data_ptr<float>();
  int64_t* ind = indices.data_ptr<int64_t>();
  const int64_t plane_in = s.h * s.w, plane_out = s.oh * s.ow;
  kernels::ForPlanes(s, [&](int64_t p, uint8_t* codes) {
    kernels::PoolPlane(s, in + p * plane_in, o + p * plane_out, codes);
    CodesToIndices(s, offsets, codes, ind + p * plane_out);
  });
  return {out, indices};
}

// Null when an index lies outside its window.
at::Tensor UnpoolFast(const at::Tensor& grad_output, const at::Tensor& self, int64_t k,
                      const at::Tensor& indices) {
  const PoolShape s = ShapeOf(self, k);
  const at::Tensor g = grad_output.contiguous();
  const at::Tensor idx = indices.contiguous();
  at::Tensor gin = at::empty(self.sizes(), grad_output.options());
  const float* gp = g.data_ptr<float>();
  const int64_t* ip = idx.data_ptr<int64_t>();
  float* out = gin.data_ptr<float>();
  const int64_t plane_in = s.h * s.w, plane_out = s.oh * s.ow;
  std::atomic<bool> inside{true};
  kernels::ForPlanes(s, [&](int64_t p, uint8_t* codes) {
    if (!IndicesToCodes(s, ip + p * plane_out, codes)) inside = false;
    kernels::UnpoolPlane(s, gp + p * plane_out, codes, out + p * plane_in);
  });
  return inside ? gin : at::Tensor();
}

// A warning handler that drops the dispatcher's "Overriding a previously registered kernel":
// replacing LibTorch's kernel is the point.
// LibTorch 2 passes the warning as one c10::Warning and moved the guard to c10::WarningUtils.
class Quiet final : public c10::WarningHandler {
 public:
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning&) override {}
#else
  void process(const c10::SourceLocation&, const std::string&, const bool) override {}
#endif
};
#if TORCH_VERSION_MAJOR >= 2
using QuietGuard = c10::WarningUtils::WarningHandlerGuard;
#else
using QuietGuard = c10::Warning::WarningHandlerGuard;
#endif

}  // namespace

std::tuple<at::Tensor, at::Tensor> MaxPool2dWithIndices(const at::Tensor& self,
                                                        at::IntArrayRef kernel_size,
                                                        at::IntArrayRef stride,
                                                        at::IntArrayRef padding,
                                                        at::IntArrayRef dilation, bool ceil_mode) {
  const int64_t k = FastWindow(self, kernel_size, stride, padding, dilation, ceil_mode);
  if (k == 0)
    return at::cpu::max_pool2d_with_indices(self, kernel_size, stride, padding, dilation,
                                            ceil_mode);
  ++g_calls;
  return PoolFast(self, k);
}

at::Tensor MaxPool2dWithIndicesBackward(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef dilation,
                                        bool ceil_mode, const at::Tensor& indices) {
  const int64_t k = FastWindow(self, kernel_size, stride, padding, dilation, ceil_mode);
  at::Tensor gin;
  if (k > 0 && grad_output.scalar_type() == at::kFloat && indices.scalar_type() == at::kLong &&
      grad_output.device().is_cpu() && indices.device().is_cpu() &&
      grad_output.layout() == at::kStrided && indices.layout() == at::kStrided) {
    const PoolShape s = ShapeOf(self, k);
    const std::vector<int64_t> out_sizes = {self.size(0), self.size(1), s.oh, s.ow};
    if (grad_output.sizes() == out_sizes && indices.sizes() == out_sizes)
      gin = UnpoolFast(grad_output, self, k, indices);
  }
  if (gin.defined()) {
    ++g_calls;
    return gin;
  }
  return at::cpu::max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
                                                   dilation, ceil_mode, indices);
}

uint64_t ShoalKernelCalls() { return g_calls.load(); }

// One registration for all live ShoalKernels: the dispatcher keeps one kernel per key.
struct ShoalKernels::Registration {
  torch::Library library{torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__};
  Registration() {
    Quiet quiet;
    QuietGuard guard(&quiet);
    library.impl("max_pool2d_with_indices", TORCH_FN(MaxPool2dWithIndices));
    library.impl("max_pool2d_with_indices_backward", TORCH_FN(MaxPool2dWithIndicesBackward));
  }
};

namespace {
std::mutex g_mu;
std::weak_ptr<ShoalKernels::Registration>& Current() {
  static auto* w = new std::weak_ptr<ShoalKernels::Registration>();
  return *w;
}
}  // namespace

ShoalKernels::ShoalKernels() {
  std::lock_guard<std::mutex> l(g_mu);
  registration_ = Current().lock();
  if (!registration_) {
    registration_ = std::make_shared<Registration>();
    Current() = registration_;
  }
}

ShoalKernels::~ShoalKernels() {
  std::lock_guard<std::mutex> l(g_mu);
  registration_.reset();
}

}  // namespace shoal
