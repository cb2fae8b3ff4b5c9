// Why a fork-server child ended before it became a worker, told by its exit code alone: its slot
// on the scoreboard is not open yet, so the code is all it can say.
#pragma once

#include <sys/wait.h>

#include <string>

namespace shoal {

enum ZygoteChildExit : int { kZygoteGone = 70, kNoProcessGroup = 71, kBadRequest = 72 };

// The reason for a fork-server worker's wait status; "" when the code is not one of these.
inline std::string ZygoteChildWhy(int wait_status) {
  if (!WIFEXITED(wait_status)) return "";
  switch (WEXITSTATUS(wait_status)) {
    case kZygoteGone:
      return "the fork-server's child found the fork-server gone";
    case kNoProcessGroup:
      return "the fork-server's child could not join the experiment's process group (its leader "
             "gone?)";
    case kBadRequest:
      return "the fork-server could not read the request for this worker (an unknown kind, or "
             "a fork-server of another version)";
    default:
      return "";
  }
}

}  // namespace shoal
