// The forkserver. shoald starts it once; it loads LibTorch, touches the kernels and the
// allocator paths the model needs with one tiny training step, and then forks workers on request.
// It stays single-threaded (one intra-op thread, no pools started), so fork is safe, and every
// worker starts with LibTorch already loaded and warm: a fork costs milliseconds where exec plus
// loading LibTorch costs ~0.4 s.
//
// Protocol (SOCK_SEQPACKET, one message a packet, proto/shoal/ipc/v1/ipc.proto):
//   leader -> forkserver  ForkRequest, with the read end of the leader's lifetime pipe and the
//                     leader's stderr attached (SCM_RIGHTS): the worker's stdout and stderr
//   forkserver -> leader  ForkServerReply: forked {index, pid} | error {message}, and
//                     exited {pid, wait_status} when a worker ends
#include "worker/fork_server.h"

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

#include "shared/ipc/ipc_codec.h"
#include "shared/ipc/packet.h"
#include "shared/kinds/kind.h"
#include "shared/os/process.h"
#include "shared/spec/spec.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "worker/attached_worker.h"
#include "worker/fork_server_exits.h"

namespace shoal {
namespace {

using ipc::v1::ForkRequest;
using ipc::v1::ForkServerReply;

// Every kind, warmed: LibTorch loaded, kernels and allocator paths touched, models built.
std::map<std::string, std::unique_ptr<WorkerKind>> WarmKinds() {
  at::set_num_threads(1);
  std::map<std::string, std::unique_ptr<WorkerKind>> kinds;
  for (const std::string& name : KindNames()) {  // every kind the daemon knows
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
[[noreturn]] void BecomeWorker(const ForkRequest& req, int lifetime_fd, int output_fd,
                               pid_t forkserver,
                               std::map<std::string, std::unique_ptr<WorkerKind>>& kinds) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::dup2(output_fd, STDOUT_FILENO);  // the experiment's captured output, not the forkserver's
  ::dup2(output_fd, STDERR_FILENO);
  ::close(output_fd);
  if (::getppid() != forkserver) _exit(kForkServerGone);
  if (::setpgid(0, req.pgid()) != 0) _exit(kNoProcessGroup);  // the experiment's group, for cancel
  auto it = kinds.find(req.spec().kind());
  if (it == kinds.end()) _exit(kBadRequest);
  _exit(RunAttachedWorker(
      {req.spec(), req.experiment_id(), req.index(), lifetime_fd, it->second.get()}));
}

void Reply(int fd, const ForkServerReply& r) { (void)SendPacket(fd, EncodePacket(r)); }

void ReplyError(int fd, const std::string& message) {
  ForkServerReply r;
  r.mutable_error()->set_message(message);
  Reply(fd, r);
}

// The forkserver's state and its event loop, one job per method.
class ForkServer {
 public:
  explicit ForkServer(const ForkServerArgs& a) : a_(a), self_(getpid()) {}
  int Run();

 private:
  void ChildSetup();  // in a new child: drop every fd of the forkserver's
  bool Prefork();     // false: the fork (or its socketpair) failed
  pid_t StartWorker(const std::string& msg, const ForkRequest& req, int lifetime, int output);
  void ReapChildren();
  void Serve(int client);
  void DropClient(int client);
  int Stop();  // closes what it holds; its idle children end as their socketpairs close

  const ForkServerArgs& a_;
  const pid_t self_;
  std::map<std::string, std::unique_ptr<WorkerKind>> kinds_;
  sigset_t chld_{};
  int sfd_ = -1, listen_fd_ = -1;
  std::map<pid_t, int> owner_;  // worker pid -> the leader connection that asked for it
  std::vector<int> clients_;
  std::deque<Idle> pool_;
  bool prefork_failed_ = false;
};

void ForkServer::ChildSetup() {
  sigprocmask(SIG_UNBLOCK, &chld_, nullptr);
  ::close(sfd_);
  ::close(listen_fd_);
  for (int c : clients_) ::close(c);
  for (const Idle& i : pool_) ::close(i.fd);
}

// A fork costs ~5 ms here (the page tables of a process with LibTorch loaded), so the forkserver
// forks ahead of demand: a request is handed to a waiting child in microseconds.
bool ForkServer::Prefork() {
  int sp[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) return false;
  auto pid = a_.processes->Fork([&]() -> int {
    ChildSetup();
    ::close(sp[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != self_) return kForkServerGone;
    std::string msg;
    std::vector<int> passed;
    if (!RecvPacket(sp[1], &msg, &passed).ok() || passed.size() != 2) return 0;  // retired
    ::close(sp[1]);
    ForkRequest req;
    if (!DecodePacket(msg, &req).ok()) return kBadRequest;
    BecomeWorker(req, passed[0], passed[1], self_, kinds_);
  });
  ::close(sp[1]);
  if (!pid.ok()) {
    ::close(sp[0]);
    return false;
  }
  pool_.push_back({*pid, sp[0]});
  return true;
}

// Hands the request to a waiting child, or forks one now; returns the worker's pid.
pid_t ForkServer::StartWorker(const std::string& msg, const ForkRequest& req, int lifetime,
                              int output) {
  while (!pool_.empty()) {
    Idle idle = pool_.front();
    pool_.pop_front();
    const bool sent = SendPacket(idle.fd, msg, {lifetime, output}).ok();
    ::close(idle.fd);
    if (sent) return idle.pid;  // (a dead idle child fails the send: try the next)
  }
  auto pid = a_.processes->Fork([&]() -> int {
    ChildSetup();
    BecomeWorker(req, lifetime, output, self_, kinds_);
  });
  return pid.ok() ? *pid : -1;
}

// Reaps ended children: an idle one is forgotten, a worker's exit goes to its leader.
void ForkServer::ReapChildren() {
  signalfd_siginfo info;
  while (::read(sfd_, &info, sizeof info) == sizeof info) {
  }
  int st;
  pid_t pid;
  while (a_.children->ReapOne(&pid, &st)) {
    auto idle =
        std::find_if(pool_.begin(), pool_.end(), [&](const Idle& i) { return i.pid == pid; });
    if (idle != pool_.end()) {
      ::close(idle->fd);
      pool_.erase(idle);
    }
    auto it = owner_.find(pid);
    if (it == owner_.end()) continue;
    ForkServerReply r;
    r.mutable_exited()->set_pid(pid);
    r.mutable_exited()->set_wait_status(st);
    Reply(it->second, r);
    owner_.erase(it);
  }
}

void ForkServer::DropClient(int c) {
  ::close(c);
  clients_.erase(std::find(clients_.begin(), clients_.end(), c));
  for (auto it = owner_.begin(); it != owner_.end();)
    it = it->second == c ? owner_.erase(it) : std::next(it);
}

// One request from a leader.
void ForkServer::Serve(int c) {
  std::string msg;
  std::vector<int> passed;
  if (!RecvPacket(c, &msg, &passed).ok()) {  // the leader is gone; its workers follow it
    for (int f : passed) ::close(f);
    DropClient(c);
    return;
  }
  ForkRequest req;
  if (!DecodePacket(msg, &req).ok() || passed.size() != 2) {
    ReplyError(c, "malformed request");
    for (int f : passed) ::close(f);
    return;
  }
  const pid_t pid = StartWorker(msg, req, passed[0], passed[1]);
  for (int f : passed) ::close(f);
  if (pid < 0) return ReplyError(c, std::string("fork: ") + std::strerror(errno));
  owner_[pid] = c;
  ForkServerReply r;
  r.mutable_forked()->set_index(req.index());
  r.mutable_forked()->set_pid(pid);
  Reply(c, r);
}

int ForkServer::Run() {
  DieWithParent(a_.parent);
  kinds_ = WarmKinds();
  // Its children map their code afresh (fork copies no page table of a clean file mapping), and
  // it runs little more than this loop: the libraries' pages it read while warming are no one's.
  DropCleanFilePages();
  sigemptyset(&chld_);
  sigaddset(&chld_, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld_, nullptr);
  sfd_ = ::signalfd(-1, &chld_, SFD_NONBLOCK | SFD_CLOEXEC);
  auto listen_fd = ListenPacket(a_.socket);
  if (sfd_ < 0 || !listen_fd.ok()) {
    std::fprintf(stderr, "forkserver: %s\n", listen_fd.status().message().c_str());
    return 1;
  }
  listen_fd_ = *listen_fd;
  for (;;) {
    std::vector<pollfd> fds = {{listen_fd_, POLLIN, 0}, {sfd_, POLLIN, 0}, {a_.stop_fd, POLLIN, 0}};
    for (int c : clients_) fds.push_back({c, POLLIN, 0});
    // Refill the pool only when nothing else is waiting; after a failed fork (a pids limit, no
    // fds) wait 100 ms before the next try rather than spin a core the runs are measured on.
    const int wait_ms = pool_.size() >= a_.pool ? -1 : prefork_failed_ ? 100 : 0;
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return 1;
    if (ready == 0) {
      prefork_failed_ = !Prefork();
      continue;
    }
    if (fds[0].revents & POLLIN) {
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c >= 0) clients_.push_back(c);
    }
    if (fds[1].revents & POLLIN) ReapChildren();
    if (fds[2].revents != 0) return Stop();
    for (size_t k = 3; k < fds.size(); ++k)
      if (fds[k].revents != 0) Serve(fds[k].fd);
  }
}

int ForkServer::Stop() {
  for (int c : clients_) ::close(c);
  for (const Idle& i : pool_) ::close(i.fd);
  ::close(listen_fd_);
  ::close(sfd_);
  sigprocmask(SIG_UNBLOCK, &chld_, nullptr);
  return 0;
}

}  // namespace

int RunForkServer(const ForkServerArgs& a) { return ForkServer(a).Run(); }

}  // namespace shoal
