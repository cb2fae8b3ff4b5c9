// The leader's half of hogwild and data_parallel without LibTorch (shoal-leader): the data set in
// its segment and, for data_parallel, the rendezvous segment; no model. Worker 0 writes the
// initial weights (HogwildKind::Attach), so a spawn or forkserver leader never loads LibTorch,
// whose initialisation alone is ~60 MiB of a leader's PSS. A model file's leader under spawn or
// the forkserver is shoal-worker until the file is probed and every segment made, then this,
// with what that leader handed off (worker/leader.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "shared/os/shm.h"
#include "worker/kind.h"

namespace shoal {

// The data set of a built-in model in a new segment, checked against the spec's training set.
Status PrepareImageData(LeaderEnv& env, ShmSegment* data);
// data_parallel's rendezvous segment (shared/ipc/layout.h), worker 0's store port not yet in it.
Status PrepareRendezvous(LeaderEnv& env, ShmSegment* rendezvous);
// Turns at the steps: hogwild's concurrent_steps where set (at most the workers), else none.
uint32_t HogwildStepSlots(const v1::ExperimentSpec& spec);

class ImageLeaderKind : public WorkerKind {
 public:
  // `handed_off`: the segments exist and the model file's figures are in it (copied).
  ImageLeaderKind(bool data_parallel, const ipc::v1::LeaderHandOff* handed_off = nullptr)
      : data_parallel_(data_parallel),
        handed_off_(handed_off ? std::optional(*handed_off) : std::nullopt) {}
  Status Prepare(LeaderEnv& env) override;
  // Never called: shoal-leader does not start workers by fork (ChooseLeader).
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  // The weights worker 0 (or the handing-off leader) wrote: their size, initial and final
  // checksums; a model file's probe step.
  void Finish(ipc::v1::LeaderResult* result) override;
  bool WorkerWritesInitialWeights() const override { return !handed_off_; }
  uint32_t StepSlots(const v1::ExperimentSpec& spec) const override {
    return HogwildStepSlots(spec);
  }
  // A model file's, from the handing-off leader's probe.
  std::optional<StepBounds> Bounds() const override;
  std::vector<std::string> SegmentWhats() const override;

 private:
  bool data_parallel_;
  std::optional<ipc::v1::LeaderHandOff> handed_off_;
  std::string weights_name_;
  std::function<void(const std::string& what, uint64_t bytes)> announce_;
  ShmSegment data_, rendezvous_;
};

}  // namespace shoal
