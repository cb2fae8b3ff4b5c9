// Where a worker trains: the CPU, or a CUDA device (its spec's cuda_devices). On CUDA the worker
// also holds the driver Shoal calls beside LibTorch: to open the leader's IPC weight buffer and to
// synchronise the device where a time is taken (LibTorch's calls return once the work is queued,
// not done).
#pragma once

#include <torch/torch.h>

#include <memory>

#include "shared/gpu/cuda_driver.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// Seeds LibTorch's CPU generator only. torch::manual_seed also seeds every CUDA generator, and to
// count them asks the driver, which initialises CUDA in the process: a process that forks
// workers afterwards (the forkserver, a fork leader) would hand them a CUDA they cannot use
// ("CUDA error: initialization error").
void SeedCpu(uint64_t seed);

// Whether a backward pass here would initialise CUDA. The autograd engine, at its first backward,
// counts the devices of every device type LibTorch registered (cudaGetDeviceCount, which
// initialises CUDA) and starts their threads; a child forked after that can use neither ("CUDA
// error: initialization error", "Unable to handle autograd's threading in combination with
// fork-based multiprocessing"). True wherever LibTorch has CUDA, device or not; asking it does
// not touch the driver.
bool BackwardTouchesCuda();

// cuda_sync events: a step's phases timed on the device. Mark(i) records event i on the stream
// LibTorch queues to (kData before the batch is made, kForward, kBackward, kUpdate, then kEnd
// after the update); once the step is done (its loss read, which waited for it) Ns(a, b) is the
// device's time from a to b. The host then waits once a step, not before every phase.
class PhaseEvents {
 public:
  enum Mark { kData = 0, kForward, kBackward, kUpdate, kEnd, kCount };
  static StatusOr<std::unique_ptr<PhaseEvents>> Make(CudaDriver* driver);
  ~PhaseEvents();
  PhaseEvents(const PhaseEvents&) = delete;
  PhaseEvents& operator=(const PhaseEvents&) = delete;
  // Both throw std::runtime_error with the driver's message, as a failed step does.
  void Record(Mark m);
  uint64_t Ns(Mark from, Mark to);

 private:
  explicit PhaseEvents(CudaDriver* driver) : driver_(driver) {}
  CudaDriver* driver_;
  CudaEvent events_[kCount] = {};
};

class TrainDevice {
 public:
  static std::shared_ptr<TrainDevice> Cpu();
  // Worker `index`'s device. cuda: the spec's CudaOrdinal for it, which LibTorch must see; it
  // is made current and initialised on this thread.
  static StatusOr<std::shared_ptr<TrainDevice>> ForSpec(const v1::ExperimentSpec& spec,
                                                        uint32_t index);

  const torch::Device& device() const { return device_; }
  bool is_cuda() const { return device_.is_cuda(); }
  CudaDriver* driver() const { return driver_.get(); }  // null on the CPU
  // Waits for the device's queued work; nothing on the CPU.
  void Sync() const;
  // Seeds the CPU generator and, on CUDA, the device's (see SeedCpu for why not manual_seed).
  void Seed(uint64_t seed) const;

 private:
  TrainDevice(torch::Device d, std::unique_ptr<CudaDriver> driver)
      : device_(d), driver_(std::move(driver)) {}
  torch::Device device_;
  std::unique_ptr<CudaDriver> driver_;
};

}  // namespace shoal
