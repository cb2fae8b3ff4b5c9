// Shoal's CPU kernels for ATen operators whose LibTorch 1.13 kernel is much slower than it need
// be, registered in the dispatcher in place of LibTorch's (`--kernels shoal`, the default): every
// caller in the worker gets them, the built-in models, a user's TorchScript model and autograd
// alike. Each computes exactly what LibTorch's does, bit for bit, with the same output tensors
// (so autograd saves the same tensors and memory does not change); an input the fast path does
// not take goes to LibTorch's own kernel. (One exception to "the same buffers": a backward given
// an index outside its window, which no forward makes, finds out after allocating the input's
// gradient, then calls LibTorch's kernel, which allocates its own.)
//
// max_pool2d_with_indices and its backward, float NCHW, kernel = stride (<= 16), no padding, no
// dilation, floor mode: LibTorch 1.13 compares element by element with branches that mispredict
// on real activations, and zero-fills the input's gradient before scattering into it. In
// mnist_convnet at batch 64 on one thread, its forward took a third of the step (155 ms of 467).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <tuple>

namespace shoal {

// The kernels are in the dispatcher while one of these lives (the worker keeps one for its
// lifetime); LibTorch's are back when the last one is gone.
class ShoalKernels {
 public:
  ShoalKernels();
  ~ShoalKernels();
  ShoalKernels(const ShoalKernels&) = delete;
  ShoalKernels& operator=(const ShoalKernels&) = delete;

  struct Registration;  // the dispatcher's handle, shared by every live ShoalKernels

 private:
  std::shared_ptr<Registration> registration_;
};

// How many calls the fast paths took (not those passed to LibTorch's kernels), all threads.
uint64_t ShoalKernelCalls();

// The kernels themselves, callable without the dispatcher (the tests compare them with
// LibTorch's at::cpu:: ones).
std::tuple<at::Tensor, at::Tensor> MaxPool2dWithIndices(const at::Tensor& self,
                                                        at::IntArrayRef kernel_size,
                                                        at::IntArrayRef stride,
                                                        at::IntArrayRef padding,
                                                        at::IntArrayRef dilation, bool ceil_mode);
at::Tensor MaxPool2dWithIndicesBackward(const at::Tensor& grad_output, const at::Tensor& self,
                                        at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                        at::IntArrayRef padding, at::IntArrayRef dilation,
                                        bool ceil_mode, const at::Tensor& indices);

}  // namespace shoal
