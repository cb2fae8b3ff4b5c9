#include "worker/kinds/pipeline/ring_link.h"

#include <string>

namespace shoal {

StatusOr<std::array<Lane, 4>> StageLanes(void* base, const PipelineLayout& layout, uint32_t stage) {
  const int b = int(stage);  // boundary b - 1 before this stage, b after it
  const int ring_of[4] = {2 * (b - 1), 2 * (b - 1) + 1, 2 * b, 2 * b + 1};  // RingLink::Side
  std::array<Lane, 4> lanes;
  for (int side = 0; side < 4; ++side) {
    const int index = ring_of[side];
    if (index < 0 || size_t(index) >= layout.rings.size()) continue;
    const PipelineRing& r = layout.rings[size_t(index)];
    ASSIGN_OR_RETURN(BatchRing ring,
                     BatchRing::Attach(static_cast<uint8_t*>(base) + r.offset, r.bytes));
    lanes[side].ring = ring;
    lanes[side].exported = RingExport(base, uint32_t(index));
  }
  return lanes;
}

Status RingLink::SendForward(uint64_t msg, const AmoebaStates& s) {
  return Send(lanes_[kToNext], msg, s);
}
Status RingLink::SendBackward(uint64_t msg, const AmoebaStates& g) {
  return Send(lanes_[kToPrev], msg, g);
}
StatusOr<AmoebaStates> RingLink::ReceiveForward(uint64_t msg) {
  return Receive(lanes_[kFromPrev], msg);
}
StatusOr<AmoebaStates> RingLink::ReceiveBackward(uint64_t msg) {
  return Receive(lanes_[kFromNext], msg);
}

Status RingLink::ExportDeviceSlots() {
  if (!cuda()) return Status::Ok();
  for (Side side : {kToPrev, kToNext}) {
    Lane& l = lanes_[side];
    if (!l.ring) continue;
    ASSIGN_OR_RETURN(l.owner, DeviceBufferOwner::Create(dev_.driver, dev_.ordinal, nullptr,
                                                        l.device_bytes(), dev_.self, l.exported));
  }
  return Status::Ok();
}

void RingLink::CloseViews() {
  for (Lane& l : lanes_) l.view.reset();
}

StatusOr<SlotData> RingLink::DataOf(Lane& l, uint64_t msg, uint8_t* slot) {
  if (!cuda()) return HostSlotData(slot);
  if (l.owner == nullptr && l.view == nullptr) {
    ASSIGN_OR_RETURN(l.view, DeviceBufferView::Open(dev_.driver, *l.exported, l.device_bytes(),
                                                    dev_.self, "pipeline slots"));
  }
  // A neighbour's buffer is read as a tensor on the neighbour's device (DecodeStates copies it
  // across to ours). The CPU here: a fake driver's.
  const DevicePtr base = l.owner ? l.owner->base() : l.view->base();
  const torch::Device on = l.owner || !dev_.device.is_cuda()
                               ? dev_.device
                               : torch::Device(torch::kCUDA, c10::DeviceIndex(l.view->device()));
  return DeviceSlotData(base + (msg % l.ring->slots()) * l.ring->slot_bytes(), on);
}

Status RingLink::Send(Lane& l, uint64_t msg, const AmoebaStates& s) {
  ASSIGN_OR_RETURN(uint8_t * buf, l.ring->BeginWrite(msg, keep_));
  ASSIGN_OR_RETURN(SlotData data, DataOf(l, msg, buf));
  ASSIGN_OR_RETURN(uint64_t n, EncodeStates(s, buf, l.ring->slot_bytes(), data));
  if (dev_.sync) dev_.sync();  // the data is in the slot before the reader is told
  l.ring->EndWrite(msg, uint32_t(n));
  return Status::Ok();
}

StatusOr<AmoebaStates> RingLink::Receive(Lane& l, uint64_t msg) {
  ASSIGN_OR_RETURN(auto in, l.ring->BeginRead(msg, keep_));
  if (in.second > l.ring->slot_bytes()) {  // its data would lie past the slot (on CUDA, the buffer)
    return DataLoss("pipeline: a message of " + std::to_string(in.second) + " bytes in a slot of " +
                    std::to_string(l.ring->slot_bytes()));
  }
  ASSIGN_OR_RETURN(SlotData data, DataOf(l, msg, const_cast<uint8_t*>(in.first)));
  auto states = DecodeStates(in.first, in.second, data, dev_.device);
  // Copied out before the writer may reuse the slot. From another device too: LibTorch queues a
  // copy across on the source device and makes our stream wait for it, so our context's
  // synchronise waits for the copy.
  if (dev_.sync) dev_.sync();
  l.ring->EndRead(msg);
  return states;
}

}  // namespace shoal
