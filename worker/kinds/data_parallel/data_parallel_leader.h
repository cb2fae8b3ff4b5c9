// data_parallel's LibTorch-free leader (shoal-leader): the image leader and the rendezvous
// segment its replicas meet through; no Gloo, no LibTorch.
#pragma once

#include "worker/image/image_leader.h"

namespace shoal {

// The rendezvous segment (shared/kinds/data_parallel/board.h), worker 0's store port not yet in
// it.
Status PrepareRendezvous(LeaderEnv& env, ShmSegment* rendezvous);

class DataParallelLeaderKind : public ImageLeaderKind {
 public:
  using ImageLeaderKind::ImageLeaderKind;
  std::vector<std::string> SegmentWhats() const override {
    return {"data", "weights", "rendezvous", "arenas"};
  }

 protected:
  Status PrepareMore(LeaderEnv& env) override { return PrepareRendezvous(env, &rendezvous_); }
  // The replicas train their own copies: the segment's are the initial weights only.
  bool SegmentHoldsFinalWeights() const override { return false; }

 private:
  ShmSegment rendezvous_;
};

}  // namespace shoal
