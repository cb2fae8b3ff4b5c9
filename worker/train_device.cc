#include "worker/train_device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <mutex>
#include <stdexcept>

namespace shoal {

namespace {

void SeedGenerator(at::Generator gen, uint64_t seed) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

}  // namespace

bool BackwardTouchesCuda() { return c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA); }

void SeedCpu(uint64_t seed) { SeedGenerator(at::detail::getDefaultCPUGenerator(), seed); }

void TrainDevice::Seed(uint64_t seed) const {
  SeedCpu(seed);
  if (is_cuda()) SeedGenerator(at::globalContext().defaultGenerator(device_), seed);
}

std::shared_ptr<TrainDevice> TrainDevice::Cpu() {
  return std::shared_ptr<TrainDevice>(new TrainDevice(torch::Device(torch::kCPU), nullptr));
}

StatusOr<std::shared_ptr<TrainDevice>> TrainDevice::ForSpec(const v1::ExperimentSpec& spec) {
  if (spec.device() != "cuda") return Cpu();
  if (!torch::cuda::is_available())
    return FailedPrecondition("device cuda: this worker's LibTorch sees no CUDA device");
  const torch::Device dev(torch::kCUDA, 0);
  // LibTorch creates the device's primary context and makes it current on this thread; the
  // driver then retains that same context.
  (void)torch::zeros({1}, torch::TensorOptions().device(dev));
  auto driver = LoadCudaDriver();
  RETURN_IF_ERROR(driver->Init(0));
  return std::shared_ptr<TrainDevice>(new TrainDevice(dev, std::move(driver)));
}

void TrainDevice::Sync() const {
  if (driver_ == nullptr) return;
  if (Status st = driver_->Synchronize(); !st.ok()) throw std::runtime_error(st.message());
}

}  // namespace shoal
