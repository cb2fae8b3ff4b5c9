// The fork-server (zygote). shoald starts it once; it loads LibTorch, touches the kernels and the
// allocator paths the model needs with one tiny training step, and then forks workers on request.
// It stays single-threaded (one intra-op thread, no pools started), so fork is safe, and every
// worker starts with LibTorch already loaded and warm: a fork costs milliseconds where exec plus
// loading LibTorch costs ~0.4 s.
//
// Protocol (SOCK_SEQPACKET, one message a packet, proto/shoal/ipc/v1/ipc.proto):
//   leader -> zygote  ForkRequest, with the read end of the leader's lifetime pipe attached
//                     (SCM_RIGHTS)
//   zygote -> leader  ForkServerReply: forked {index, pid} | error {message}, and
//                     exited {pid, wait_status} when a worker ends
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <map>

#include "shared/ipc_codec.h"
#include "shared/packet.h"
#include "shared/process.h"
#include "shared/spec.h"
#include "worker/leader.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "worker/training.h"

namespace shoal {
namespace {

using ipc::v1::ForkRequest;
using ipc::v1::ForkServerReply;

// Every kind, warmed: LibTorch loaded, kernels and allocator paths touched, models built.
std::map<std::string, std::unique_ptr<WorkerKind>> WarmKinds() {
  at::set_num_threads(1);
  std::map<std::string, std::unique_ptr<WorkerKind>> kinds;
  for (const char* name : {"hogwild"}) {
    auto k = MakeWorkerKind(name);
    if (k == nullptr) continue;
    k->Warm();
    kinds[name] = std::move(k);
  }
  return kinds;
}

// An idle child forked ahead of demand, waiting on its end of a socketpair for a request.
struct Idle {
  pid_t pid;
  int fd;
};

// In the forked child: become a worker of the leader's experiment.
[[noreturn]] void BecomeWorker(const ForkRequest& req, int lifetime_fd, pid_t zygote,
                               std::map<std::string, std::unique_ptr<WorkerKind>>& kinds) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != zygote) _exit(70);
  if (::setpgid(0, req.pgid()) != 0) _exit(71);  // the experiment's group, for cancel
  auto it = kinds.find(req.spec().kind());
  if (it == kinds.end()) _exit(72);
  _exit(RunAttachedWorker(
      {req.spec(), req.experiment_id(), req.index(), lifetime_fd, it->second.get()}));
}

void Reply(int fd, const ForkServerReply& r) { (void)SendPacket(fd, EncodePacket(r)); }

void ReplyError(int fd, const std::string& message) {
  ForkServerReply r;
  r.mutable_error()->set_message(message);
  Reply(fd, r);
}

}  // namespace

int RunZygote(const ZygoteArgs& a) {
  DieWithParent(a.parent);
  auto kinds = WarmKinds();

  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sfd = ::signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  auto listen_fd = ListenPacket(a.socket);
  if (sfd < 0 || !listen_fd.ok()) {
    std::fprintf(stderr, "zygote: %s\n", listen_fd.status().message().c_str());
    return 1;
  }
  const pid_t self = getpid();
  std::map<pid_t, int> owner;  // worker pid -> the leader connection that asked for it
  std::vector<int> clients;
  std::deque<Idle> pool;

  // In a new child: drop every fd of the zygote's.
  auto child_setup = [&] {
    sigprocmask(SIG_UNBLOCK, &chld, nullptr);
    ::close(sfd);
    ::close(*listen_fd);
    for (int c : clients) ::close(c);
    for (const Idle& i : pool) ::close(i.fd);
  };
  // A fork costs ~5 ms here (the page tables of a process with LibTorch loaded), so the zygote
  // forks ahead of demand: a request is handed to a waiting child in microseconds.
  auto prefork = [&] {
    int sp[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) return;
    const pid_t pid = ::fork();
    if (pid == 0) {
      child_setup();
      ::close(sp[0]);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != self) _exit(70);
      std::string msg;
      std::vector<int> passed;
      if (!RecvPacket(sp[1], &msg, &passed).ok() || passed.size() != 1) _exit(0);  // retired
      ::close(sp[1]);
      ForkRequest req;
      if (!DecodePacket(msg, &req).ok()) _exit(72);
      BecomeWorker(req, passed[0], self, kinds);
    }
    ::close(sp[1]);
    if (pid < 0) {
      ::close(sp[0]);
      return;
    }
    pool.push_back({pid, sp[0]});
  };
  // Hands the request to a waiting child, or forks one now; returns the worker's pid.
  auto start_worker = [&](const std::string& msg, const ForkRequest& req, int lifetime) -> pid_t {
    while (!pool.empty()) {
      Idle idle = pool.front();
      pool.pop_front();
      const bool sent = SendPacket(idle.fd, msg, {lifetime}).ok();
      ::close(idle.fd);
      if (sent) return idle.pid;  // (a dead idle child fails the send: try the next)
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      child_setup();
      BecomeWorker(req, lifetime, self, kinds);
    }
    return pid;
  };

  for (;;) {
    std::vector<pollfd> fds = {{*listen_fd, POLLIN, 0}, {sfd, POLLIN, 0}};
    for (int c : clients) fds.push_back({c, POLLIN, 0});
    // Refill the pool only when nothing else is waiting.
    const int timeout = pool.size() < a.pool ? 0 : -1;
    const int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (ready == 0) {
      prefork();
      continue;
    }
    if (fds[0].revents & POLLIN) {
      int c = ::accept4(*listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) clients.push_back(c);
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(sfd, &info, sizeof info) == sizeof info) {
      }
      int st;
      pid_t pid;
      while ((pid = ::waitpid(-1, &st, WNOHANG)) > 0) {
        for (auto it = pool.begin(); it != pool.end(); ++it) {
          if (it->pid == pid) {  // an idle child died: forget it
            ::close(it->fd);
            pool.erase(it);
            break;
          }
        }
        auto it = owner.find(pid);
        if (it == owner.end()) continue;
        ForkServerReply r;
        r.mutable_exited()->set_pid(pid);
        r.mutable_exited()->set_wait_status(st);
        Reply(it->second, r);
        owner.erase(it);
      }
    }
    for (size_t k = 2; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const int c = fds[k].fd;
      std::string msg;
      std::vector<int> passed;
      Status st = RecvPacket(c, &msg, &passed);
      if (!st.ok()) {  // the leader is gone; its workers follow through their lifetime pipe
        ::close(c);
        clients.erase(std::find(clients.begin(), clients.end(), c));
        for (auto it = owner.begin(); it != owner.end();)
          it = it->second == c ? owner.erase(it) : std::next(it);
        for (int f : passed) ::close(f);
        continue;
      }
      ForkRequest req;
      if (!DecodePacket(msg, &req).ok() || passed.size() != 1) {
        ReplyError(c, "malformed request");
        for (int f : passed) ::close(f);
        continue;
      }
      const pid_t pid = start_worker(msg, req, passed[0]);
      ::close(passed[0]);
      if (pid < 0) {
        ReplyError(c, std::string("fork: ") + std::strerror(errno));
        continue;
      }
      owner[pid] = c;
      ForkServerReply r;
      r.mutable_forked()->set_index(req.index());
      r.mutable_forked()->set_pid(pid);
      Reply(c, r);
    }
  }
}

}  // namespace shoal
