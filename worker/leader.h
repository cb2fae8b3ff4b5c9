// The leader of an experiment (the "main process" of torch.multiprocessing), in shoal-worker
// (LibTorch loaded: start fork, a model file, shared CUDA weights) or in shoal-leader (none).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "shoal/v1/shoal.pb.h"
#include "worker/kind.h"

namespace shoal {

struct LeaderArgs {
  v1::ExperimentSpec spec;
  std::string experiment_id;
  int status_fd = 3;               // length-delimited ipc::v1::LeaderEvent frames to shoald
  pid_t parent = 0;                // shoald; we die with it
  std::string worker_bin;          // for --start spawn
  std::string fork_server_socket;  // for --start forkserver
  // shoal-worker's: shoal-leader, to exec once the kind is prepared where the spec hands off
  // (shared/spec ChooseLeader); empty: lead the run itself.
  std::string leader_bin;
  // shoal-leader's, after that exec: what the LibTorch leader prepared.
  std::optional<ipc::v1::LeaderHandOff> handed_off;
};

// The hand-off shoal-worker's leader wrote to `fd` before its exec (closed once read);
// DATA_LOSS when it is not one whole message.
StatusOr<ipc::v1::LeaderHandOff> ReadHandOff(int fd);

// Prepares the kind (`make`'s for the spec), creates the scoreboard, starts and watches the
// workers, reports a result. Returns the exit code of the leader process. LibTorch-free itself:
// shoal-leader links it without LibTorch.
int RunLeader(const LeaderArgs& args, const LeaderKindMaker& make);

}  // namespace shoal
