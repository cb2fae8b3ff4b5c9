// What differs between the LibTorch versions the worker builds against: Debian's 1.13 here, and
// a GPU node's current 2.x (the one inside its PyTorch). Only what the worker's code meets.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>

#define SHOAL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10::Allocator: from 2.3 allocate() is no longer const and copy_data() must be given.
#if SHOAL_TORCH_AT_LEAST(2, 3)
#define SHOAL_ALLOCATE_CONST
#define SHOAL_ALLOCATOR_COPY_DATA                                                 \
  void copy_data(void* dest, const void* src, std::size_t count) const override { \
    std::memcpy(dest, src, count);                                                \
  }
#else
#define SHOAL_ALLOCATE_CONST const
#define SHOAL_ALLOCATOR_COPY_DATA
#endif

namespace shoal {

// torch::optim::Optimizer's state is keyed by the parameter's TensorImpl: as its address printed
// (1.13) or the address itself (2.x). StateMap is the optimizer's state_ type.
template <typename StateMap>
typename StateMap::key_type OptimizerStateKey(const at::Tensor& p) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;  // as 1.13's c10::guts::to_string writes it
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

}  // namespace shoal
