#include "worker/attached_worker.h"

#include <cstdio>

#include "shared/os/process.h"
#include "shared/spec/spec.h"
#include "worker/scoreboard.h"

namespace shoal {

int RunAttachedWorker(const AttachedWorkerArgs& a) {
  std::unique_ptr<WorkerKind> fresh;
  WorkerKind* kind = a.kind;
  if (kind == nullptr) {
    fresh = MakeWorkerKind(a.spec.kind());
    kind = fresh.get();
  }
  auto board = Scoreboard::Open(SegmentName(a.experiment_id, "scoreboard"), a.index);
  if (kind == nullptr || !board.ok()) {
    std::fprintf(stderr, "worker %u: %s\n", a.index,
                 kind == nullptr ? "unknown kind" : board.status().message().c_str());
    return 1;
  }
  try {
    WorkerEnv env{a.spec,        a.experiment_id, a.index,
                  a.lifetime_fd, board->header(), board->slot(a.index)};
    VolunteerForOomKiller();
    HeartbeatThread beat(env.slot);
    EndProcessNow(kind->RunWorker(env, /*forked_from_leader=*/false));
  } catch (const std::exception& e) {
    return WorkerFails(board->slot(a.index), a.index, e.what());
  }
}

}  // namespace shoal
