// The LibTorch-free leader (shoal-leader) of the kinds that train an image model with ImageKind
// (hogwild, data_parallel): the data set in its segment, whatever else the kind adds; no model.
// Worker 0 writes the initial weights (ImageKind::Attach), so a spawn or forkserver leader never
// loads LibTorch,
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

// A kind's leader derives from it for what it adds (hogwild's turns, data_parallel's rendezvous).
class ImageLeaderKind : public WorkerKind {
 public:
  // `handed_off`: the segments exist and the model file's figures are in it (copied).
  explicit ImageLeaderKind(const ipc::v1::LeaderHandOff* handed_off = nullptr)
      : handed_off_(handed_off ? std::optional(*handed_off) : std::nullopt) {}
  Status Prepare(LeaderEnv& env) override;
  // Never called: shoal-leader does not start workers by fork (ChooseLeader).
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  // The weights worker 0 (or the handing-off leader) wrote: their size, initial and final
  // checksums; a model file's probe step.
  void Finish(ipc::v1::LeaderResult* result) override;
  bool WorkerWritesInitialWeights() const override { return !handed_off_; }
  // A model file's, from the handing-off leader's probe.
  std::optional<StepBounds> Bounds() const override;
  // "arenas": the shared step arenas a worker makes when workers take turns (shared_arenas.h).
  std::vector<std::string> SegmentWhats() const override { return {"data", "weights", "arenas"}; }

 protected:
  // The kind's segments beyond the data set (not made again after a hand-off).
  virtual Status PrepareMore(LeaderEnv& /*env*/) { return Status::Ok(); }
  // Whether the weights segment ends holding the trained weights (shared ones), or only the
  // initial ones (replicas train their own copies).
  virtual bool SegmentHoldsFinalWeights() const { return true; }

 private:
  std::optional<ipc::v1::LeaderHandOff> handed_off_;
  std::string weights_name_;
  std::function<void(const std::string& what, uint64_t bytes)> announce_;
  ShmSegment data_;
};

}  // namespace shoal
