// Message-at-a-time unix sockets (SOCK_SEQPACKET) that can carry file descriptors (SCM_RIGHTS):
// how a leader asks the forkserver for workers and hands each one its lifetime pipe.
#pragma once

#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

// Listens on `path` (mode 0600), replacing a stale socket file.
StatusOr<int> ListenPacket(const std::string& path);
// `wait`: false fails at once (Unavailable) where a blocking connect would wait for room in a
// listener's backlog that a stopped listener never makes.
StatusOr<int> ConnectPacket(const std::string& path, bool wait = true);

Status SendPacket(int fd, const std::string& data, const std::vector<int>& fds = {});
// Receives one packet; an orderly close by the peer is kUnavailable. Received fds are CLOEXEC.
Status RecvPacket(int fd, std::string* data, std::vector<int>* fds = nullptr);

}  // namespace shoal
