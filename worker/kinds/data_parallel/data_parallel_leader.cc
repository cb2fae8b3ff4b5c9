#include "worker/kinds/data_parallel/data_parallel_leader.h"

#include "shared/ipc/layout.h"
#include "shared/kinds/data_parallel/board.h"
#include "worker/scoreboard.h"

namespace shoal {

Status PrepareRendezvous(LeaderEnv& env, ShmSegment* rendezvous) {
  ASSIGN_OR_RETURN(*rendezvous, ShmSegment::Create(SegmentName(env.experiment_id, "rendezvous"),
                                                   sizeof(data_parallel::RendezvousHeader)));
  auto* h = static_cast<data_parallel::RendezvousHeader*>(rendezvous->data());
  h->magic = data_parallel::kRendezvousMagic;
  h->version = kLayoutVersion;
  h->port.store(0);
  env.segment_created("rendezvous", rendezvous->size());
  return Status::Ok();
}

}  // namespace shoal
