#include "worker/train_device.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

#include <mutex>
#include <stdexcept>
#include <string>

#include "shared/spec/spec.h"

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

StatusOr<std::shared_ptr<TrainDevice>> TrainDevice::ForSpec(const v1::ExperimentSpec& spec,
                                                            uint32_t index) {
  if (spec.device() != "cuda") return Cpu();
  if (!torch::cuda::is_available())
    return FailedPrecondition("device cuda: this worker's LibTorch sees no CUDA device");
  const uint32_t ordinal = CudaOrdinal(spec, index);
  const size_t seen = torch::cuda::device_count();
  if (ordinal >= seen)  // the daemon checked against its worker's count; this one may see fewer
    return FailedPrecondition("cuda_devices: device " + std::to_string(ordinal) +
                              ", but this worker's LibTorch sees " + std::to_string(seen));
  const torch::Device dev(torch::kCUDA, c10::DeviceIndex(ordinal));
  // LibTorch makes the device current on this thread (so its later calls without a guard use
  // it), creating its primary context; the driver then retains that same context.
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->setDevice(dev);
  (void)torch::zeros({1}, torch::TensorOptions().device(dev));
  auto driver = LoadCudaDriver();
  RETURN_IF_ERROR(driver->Init(int(ordinal)));
  return std::shared_ptr<TrainDevice>(new TrainDevice(dev, std::move(driver)));
}

StatusOr<std::unique_ptr<PhaseEvents>> PhaseEvents::Make(CudaDriver* driver) {
  std::unique_ptr<PhaseEvents> p(new PhaseEvents(driver));
  for (CudaEvent& e : p->events_) {
    ASSIGN_OR_RETURN(e, driver->CreateEvent());
  }
  return p;
}

PhaseEvents::~PhaseEvents() {
  for (CudaEvent e : events_)
    if (e != nullptr) (void)driver_->DestroyEvent(e);
}

void PhaseEvents::Record(Mark m) {
  if (Status st = driver_->RecordEvent(events_[m]); !st.ok())
    throw std::runtime_error(st.message());
}

uint64_t PhaseEvents::Ns(Mark from, Mark to) {
  auto ms = driver_->ElapsedMs(events_[from], events_[to]);
  if (!ms.ok()) throw std::runtime_error(ms.status().message());
  return *ms > 0 ? uint64_t(double(*ms) * 1e6) : 0;
}

void TrainDevice::Sync() const {
  if (driver_ == nullptr) return;
  if (Status st = driver_->Synchronize(); !st.ok()) throw std::runtime_error(st.message());
}

}  // namespace shoal
