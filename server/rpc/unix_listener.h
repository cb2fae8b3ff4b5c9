// shoald's unix socket, accepted here rather than by gRPC so that each connection's peer
// credentials (SO_PEERCRED: the connecting process's uid and gid) are read before gRPC serves it.
// Each accepted connection is handed to the running server (grpc::AddInsecureChannelFromFd), which
// names its peer "fd:N": the PeerTable maps that back to the credentials.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "server/rpc/access.h"
#include "shared/status.h"

namespace shoal {

class UnixListener {
 public:
  // Binds and listens on `path`: mode 0600, or 0660 with its group set to `group`.
  static StatusOr<std::unique_ptr<UnixListener>> Open(const std::string& path,
                                                      std::optional<gid_t> group);
  ~UnixListener();  // stops accepting, removes the socket file

  // Accepts connections on a thread of its own until destroyed.
  void Serve(grpc::Server* server, PeerTable* peers);

 private:
  UnixListener(std::string path, int fd, ino_t ino) : path_(std::move(path)), fd_(fd), ino_(ino) {}
  void AcceptLoop(grpc::Server* server, PeerTable* peers);

  std::string path_;
  int fd_;
  ino_t ino_;  // the socket file we made
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shoal
