// Why a forkserver child ended before it became a worker, told by its exit code alone: its slot
// on the scoreboard is not open yet, so the code is all it can say.
#pragma once

#include <sys/wait.h>

#include <string>

namespace shoal {

enum ForkServerChildExit : int { kForkServerGone = 70, kNoProcessGroup = 71, kBadRequest = 72 };

// The reason for a forkserver worker's wait status; "" when the code is not one of these.
inline std::string ForkServerChildWhy(int wait_status) {
  if (!WIFEXITED(wait_status)) return "";
  switch (WEXITSTATUS(wait_status)) {
    case kForkServerGone:
      return "the forkserver's child found the forkserver gone";
    case kNoProcessGroup:
      return "the forkserver's child could not join the experiment's process group (its leader "
             "gone?)";
    case kBadRequest:
      return "the forkserver could not read the request for this worker (an unknown kind, or "
             "a forkserver of another version)";
    default:
      return "";
  }
}

}  // namespace shoal
