// A pipeline stage's link to its neighbours through the rings segment
// (shared/kinds/pipeline/pipeline.h): a micro-batch's states go into a ring slot and come out of it
// copied, once. On the CPU the slot holds them whole. Between CUDA stages the slot holds their
// headers and the data stays on the GPU, in a device buffer per ring that the ring's writer
// allocates and exports with CUDA IPC and its reader maps (shared/gpu/cuda_ipc.h): a
// device-to-device copy in, another out.
#pragma once

#include <sys/types.h>
#include <torch/torch.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>

#include "shared/gpu/cuda_ipc.h"
#include "shared/ipc/batch_ring.h"
#include "shared/kinds/pipeline/pipeline.h"
#include "worker/kinds/pipeline/pipeline_stage.h"

namespace shoal {

// One direction across one stage boundary: its ring and, between CUDA stages, the device buffer
// of its slots' data (slot i's at i x slot_bytes).
struct Lane {
  std::optional<BatchRing> ring;  // none beyond the pipeline's ends
  CudaExport* exported = nullptr;
  std::unique_ptr<DeviceBufferOwner> owner;  // the writer's
  std::unique_ptr<DeviceBufferView> view;    // the reader's, mapped at its first read
  uint64_t device_bytes() const { return uint64_t(ring->slots()) * ring->slot_bytes(); }
};

// Stage `stage`'s four lanes in a rings segment mapped at `base`, in RingLink::Side order.
StatusOr<std::array<Lane, 4>> StageLanes(void* base, const PipelineLayout& layout, uint32_t stage);

// Where the stage trains. driver null: the CPU, every slot holds its data.
struct LinkDevice {
  CudaDriver* driver = nullptr;
  torch::Device device = torch::kCPU;
  int ordinal = 0;  // CUDA: the device this stage's buffers are on (device's index; fakes: any)
  std::function<void()> sync;  // waits for the device's queued copies
  pid_t self = 0;              // CUDA IPC opens no export of one's own
};

class RingLink : public StageLink {
 public:
  enum Side { kFromPrev, kToPrev, kToNext, kFromNext };
  RingLink(std::array<Lane, 4> lanes, LinkDevice device, BatchRing::KeepWaiting keep)
      : lanes_(std::move(lanes)), dev_(std::move(device)), keep_(std::move(keep)) {}
  Status SendForward(uint64_t msg, const AmoebaStates& s) override;
  Status SendBackward(uint64_t msg, const AmoebaStates& g) override;
  StatusOr<AmoebaStates> ReceiveForward(uint64_t msg) override;
  StatusOr<AmoebaStates> ReceiveBackward(uint64_t msg) override;

  // CUDA: allocates and exports the device buffers of the rings this stage writes. Before the
  // start gate, so that a neighbour's first read finds them.
  Status ExportDeviceSlots();
  // CUDA: closes this stage's mappings of its neighbours' buffers. A stage frees its own (when
  // the link is destroyed) only once every reader has closed: see the pipeline kind's EndStage.
  void CloseViews();

 private:
  StatusOr<SlotData> DataOf(Lane& l, uint64_t msg, uint8_t* slot);
  Status Send(Lane& l, uint64_t msg, const AmoebaStates& s);
  StatusOr<AmoebaStates> Receive(Lane& l, uint64_t msg);
  bool cuda() const { return dev_.driver != nullptr; }

  std::array<Lane, 4> lanes_;
  LinkDevice dev_;
  BatchRing::KeepWaiting keep_;
};

}  // namespace shoal
