// What a starting shoald does with the state a previous one left: experiments that were running
// are marked interrupted, queued points of a cancelled sweep are cancelled, an interrupted sweep
// point is queued again as a new attempt, and segments no live experiment owns are removed.
// Points placed on Slurm are left as they are: their tasks do not depend on this daemon.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "server/store.h"
#include "shared/os/os_seams.h"
#include "shared/status.h"

namespace shoal {

struct Recovered {
  std::vector<v1::Experiment> queue;        // to queue again, in order
  std::vector<v1::Sweep> sweeps;            // brought up to date with their experiments
  std::vector<v1::Experiment> interrupted;  // marked interrupted now (they were running)
  // Points placed on Slurm and not ended: their tasks ran on without this daemon, and are
  // followed again from the job id their sweep recorded.
  std::vector<v1::Experiment> elsewhere;
};

StatusOr<Recovered> Recover(Store* store, SegmentJanitor* segments,
                            const std::function<std::string(const char*)>& new_id);

}  // namespace shoal
