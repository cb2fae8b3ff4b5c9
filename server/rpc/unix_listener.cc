#include "server/rpc/unix_listener.h"

#include <grp.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "spdlog/spdlog.h"

namespace shoal {
namespace {

// The peer's uid and gid from the kernel, and its user's supplementary groups.
std::optional<UnixPeer> PeerOf(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  UnixPeer p{cred.uid, cred.gid, {}};
  passwd pw{}, *found = nullptr;
  char buf[4096];
  if (::getpwuid_r(cred.uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    int n = 64;
    p.groups.resize(size_t(n));
    if (::getgrouplist(pw.pw_name, cred.gid, p.groups.data(), &n) < 0) {
      p.groups.resize(size_t(n));
      ::getgrouplist(pw.pw_name, cred.gid, p.groups.data(), &n);
    }
    p.groups.resize(size_t(std::max(n, 0)));
  }
  return p;
}

}  // namespace

StatusOr<std::unique_ptr<UnixListener>> UnixListener::Open(const std::string& path,
                                                           std::optional<gid_t> group) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path)
    return InvalidArgument("socket: " + path + " is longer than a unix socket path may be");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Unavailable(std::string("socket: ") + std::strerror(errno));
  // Mode and owner are set between bind and listen: nothing can connect to a socket that does
  // not listen yet, so no umask is needed (it is the process's, and other threads' files would
  // be made under it).
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Unavailable("cannot listen on " + path + ": " + why);
  }
  if ((group && ::chown(path.c_str(), uid_t(-1), *group) != 0) ||
      ::chmod(path.c_str(), group ? 0660 : 0600) != 0 || ::listen(fd, 128) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    ::unlink(path.c_str());  // ours: bound just now
    return Unavailable((group ? "cannot give " + path + " to group " + std::to_string(*group)
                              : "cannot listen on " + path) +
                       ": " + why);
  }
  struct stat st {};
  const ino_t ino = ::lstat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  return std::unique_ptr<UnixListener>(new UnixListener(path, fd, ino));
}

void UnixListener::Serve(grpc::Server* server, PeerTable* peers) {
  thread_ = std::thread([this, server, peers] { AcceptLoop(server, peers); });
}

void UnixListener::AcceptLoop(grpc::Server* server, PeerTable* peers) {
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;  // a timeout: look at stop_ again
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
      // Out of descriptors: the pending connection stays queued and poll says so at once;
      // without a pause this loop spun a core while clients held 20,000 idle connections.
      spdlog::warn("accept on the unix socket: {}; pausing 100 ms", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (c < 0) continue;
    const std::optional<UnixPeer> peer = PeerOf(c);
    if (!peer) {
      spdlog::warn("no peer credentials on a new connection: closed");
      ::close(c);
      continue;
    }
    peers->Set(c, *peer);  // before gRPC can read a request from it
    grpc::AddInsecureChannelFromFd(server, c);
  }
}

UnixListener::~UnixListener() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
  // Only our own socket: a daemon started after a stale-socket takeover may own the path now.
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && st.st_ino == ino_) ::unlink(path_.c_str());
}

}  // namespace shoal
