#include "shared/ipc/packet.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace shoal {
namespace {

constexpr size_t kMaxPacket = 1 << 20;
constexpr size_t kMaxFds = 8;

StatusOr<sockaddr_un> Address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return InvalidArgument("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

}  // namespace

StatusOr<int> ListenPacket(const std::string& path) {
  ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(std::string("socket: ") + std::strerror(errno));
  ::unlink(path.c_str());
  const mode_t old = ::umask(0077);
  const int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (rc != 0 || ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    return Internal("listen on " + path + ": " + std::strerror(e));
  }
  return fd;
}

StatusOr<int> ConnectPacket(const std::string& path, bool wait) {
  ASSIGN_OR_RETURN(sockaddr_un addr, Address(path));
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | (wait ? 0 : SOCK_NONBLOCK), 0);
  if (fd < 0) return Internal(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    return Unavailable("connect to " + path + ": " + std::strerror(e));
  }
  return fd;
}

Status SendPacket(int fd, const std::string& data, const std::vector<int>& fds) {
  if (fds.size() > kMaxFds) return InvalidArgument("too many fds in one packet");
  iovec iov{const_cast<char*>(data.data()), data.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) return Status::Ok();
    if (errno != EINTR) return Unavailable(std::string("send: ") + std::strerror(errno));
  }
}

Status RecvPacket(int fd, std::string* data, std::vector<int>* fds) {
  data->resize(kMaxPacket);
  iovec iov{data->data(), data->size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Unavailable(std::string("recv: ") + std::strerror(errno));
  if (n == 0) return Unavailable("peer closed the connection");
  data->resize(static_cast<size_t>(n));
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int got;
      std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof got);
      if (fds != nullptr) {
        fds->push_back(got);
      } else {
        ::close(got);
      }
    }
  }
  if (msg.msg_flags & MSG_TRUNC) return DataLoss("packet larger than 1 MiB");
  return Status::Ok();
}

}  // namespace shoal
