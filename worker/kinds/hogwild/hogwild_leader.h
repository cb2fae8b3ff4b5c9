// The leader's half of hogwild and data_parallel without LibTorch (shoal-leader): the data set in
// its segment and, for data_parallel, the rendezvous segment; no model. Worker 0 writes the
// initial weights (HogwildKind::Attach), so a spawn or forkserver leader never loads LibTorch,
// whose initialisation alone is ~60 MiB of a leader's PSS.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "shared/os/shm.h"
#include "worker/kind.h"

namespace shoal {

// The data set of a built-in model in a new segment, checked against the spec's training set.
Status PrepareImageData(LeaderEnv& env, ShmSegment* data);
// data_parallel's rendezvous segment (shared/ipc/layout.h), worker 0's store port not yet in it.
Status PrepareRendezvous(LeaderEnv& env, ShmSegment* rendezvous);

class ImageLeaderKind : public WorkerKind {
 public:
  explicit ImageLeaderKind(bool data_parallel) : data_parallel_(data_parallel) {}
  Status Prepare(LeaderEnv& env) override;
  // Never called: shoal-leader does not start workers by fork (ChooseLeader).
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  // The weights worker 0 wrote: their size, initial and final checksums.
  void Finish(ipc::v1::LeaderResult* result) override;
  bool WorkerWritesInitialWeights() const override { return true; }
  std::vector<std::string> SegmentWhats() const override;

 private:
  bool data_parallel_;
  std::string weights_name_;
  std::function<void(const std::string& what, uint64_t bytes)> announce_;
  ShmSegment data_, rendezvous_;
};

}  // namespace shoal
