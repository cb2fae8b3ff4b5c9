#include "worker/launchers.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "shared/ipc/ipc_codec.h"
#include "shared/ipc/packet.h"
#include "shared/os/process.h"
#include "shared/spec/spec.h"
#include "shoal/ipc/v1/ipc.pb.h"

namespace shoal {

Status ReapChildren(ChildWaiter& children, std::vector<WorkerLauncher::Exit>* exits) {
  int st = 0;
  pid_t pid;
  while (children.ReapOne(&pid, &st)) exits->push_back({pid, st});
  return Status::Ok();
}

namespace {

class ForkLauncher : public WorkerLauncher {
 public:
  ForkLauncher(const LaunchContext& c, std::function<int(uint32_t)> body)
      : c_(c), body_(std::move(body)) {}
  StatusOr<pid_t> Start(uint32_t index) override {
    const pid_t leader = getpid();
    return c_.processes->Fork([this, index, leader] {
      // The leader's cleanup handler is not the worker's: a SIGINT (or a library's SIGALRM) sent
      // to one worker would have removed the segments and killed the whole group, the leader
      // with it, unexplained.
      for (int sig : {SIGTERM, SIGHUP, SIGINT, SIGALRM}) ::signal(sig, SIG_DFL);
      DieWithParent(leader);
      ::close(c_.status_fd);  // only the leader reports to shoald: its EOF means the leader is gone
      ::close(c_.lifetime_write_fd);  // or the pipe would never read EOF while we live
      int rc = 1;
      try {
        rc = body_(index);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "worker %u: %s\n", index, e.what());
      }
      return rc;
    });
  }
  Status Poll(std::vector<Exit>* exits) override { return ReapChildren(*c_.children, exits); }

 private:
  LaunchContext c_;
  std::function<int(uint32_t)> body_;
};

class SpawnLauncher : public WorkerLauncher {
 public:
  explicit SpawnLauncher(const LaunchContext& c) : c_(c) {}
  StatusOr<pid_t> Start(uint32_t index) override {
    return c_.processes->Spawn(
        {c_.worker_bin, "--role", "worker", "--experiment", c_.experiment_id, "--index",
         std::to_string(index), "--spec-json", SpecToJson(c_.spec), "--parent",
         std::to_string(getpid()), "--lifetime-fd", "4"},
        {{{c_.lifetime_read_fd, 4}}, false});
  }
  Status Poll(std::vector<Exit>* exits) override { return ReapChildren(*c_.children, exits); }

 private:
  LaunchContext c_;
};

// The forkserver forks the worker, which joins our process group; the forkserver reports the
// worker's exit to us, since it and not we is the parent.
class ForkServerLauncher : public WorkerLauncher {
 public:
  explicit ForkServerLauncher(const LaunchContext& c) : c_(c) {}
  ~ForkServerLauncher() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Connect();
  Status StartAll(uint32_t n, const std::function<void(uint32_t)>& requested,
                  std::vector<pid_t>* pids) override;
  StatusOr<pid_t> Start(uint32_t index) override {
    RETURN_IF_ERROR(Request(index));
    return Reply();
  }
  Status Poll(std::vector<Exit>* exits) override;

 private:
  Status Request(uint32_t index);
  StatusOr<pid_t> Reply();
  Status Receive(ipc::v1::ForkServerReply* reply);

  LaunchContext c_;
  int fd_ = -1;
  std::vector<Exit> pending_;
};

Status ForkServerLauncher::Connect() {
  // shoald restarts a dead forkserver; give a fresh one a moment to listen.
  Status last;
  for (int i = 0; i < 100; ++i) {
    auto fd = ConnectPacket(c_.fork_server_socket);
    if (fd.ok()) {
      fd_ = *fd;
      return Status::Ok();
    }
    last = fd.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Unavailable("forkserver not reachable: " + last.message());
}

// All requests go out before the first reply is read: the forkserver forks while we wait. At most
// kWindow requests are in flight, so neither side's socket buffer can fill up while the other is
// blocked sending.
Status ForkServerLauncher::StartAll(uint32_t n, const std::function<void(uint32_t)>& requested,
                                    std::vector<pid_t>* pids) {
  constexpr uint32_t kWindow = 32;
  uint32_t sent = 0;
  uint32_t answered = 0;
  while (answered < n) {
    while (sent < n && sent - answered < kWindow) {
      requested(sent);
      RETURN_IF_ERROR(Request(sent++));
    }
    auto pid = Reply();
    ++answered;
    if (!pid.ok()) {
      // The requests already sent are forked all the same: take their replies (-1 where a fork
      // failed), so that the caller knows and stops every worker there is. A silent forkserver
      // ends the wait.
      pids->push_back(-1);
      for (Status why = pid.status(); answered < sent && why.code() != Code::kUnavailable;) {
        auto late = Reply();
        ++answered;
        why = late.status();
        if (why.code() != Code::kUnavailable) pids->push_back(late.ok() ? *late : -1);
      }
      return pid.status();
    }
    pids->push_back(*pid);
  }
  return Status::Ok();
}

Status ForkServerLauncher::Request(uint32_t index) {
  ipc::v1::ForkRequest req;
  req.set_experiment_id(c_.experiment_id);
  req.set_index(index);
  *req.mutable_spec() = c_.spec;
  req.set_pgid(::getpgrp());
  req.set_leader_pid(getpid());
  // With its output: the leader's stderr (shoald's capture), which the worker takes as 1 and 2.
  return SendPacket(fd_, EncodePacket(req), {c_.lifetime_read_fd, STDERR_FILENO});
}

Status ForkServerLauncher::Receive(ipc::v1::ForkServerReply* reply) {
  std::string msg;
  RETURN_IF_ERROR(RecvPacket(fd_, &msg));
  return DecodePacket(msg, reply);
}

// Replies come in request order; exits of earlier workers may arrive in between. A forkserver
// that stops answering (stopped, wedged) fails the run after the stall timeout, as a worker
// without a heartbeat does; the step timeout stands in when stall detection is off, and with
// both off it is waited for.
StatusOr<pid_t> ForkServerLauncher::Reply() {
  const uint32_t limit_ms =
      c_.spec.stall_timeout_ms() > 0 ? c_.spec.stall_timeout_ms() : c_.spec.step_timeout_ms();
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, limit_ms > 0 ? int(limit_ms) : -1);
    if (ready == 0) {
      return Unavailable("the forkserver did not answer a fork request within " +
                         std::to_string(limit_ms) + " ms (stopped or overloaded?)");
    }
    if (ready < 0 && errno != EINTR) return Internal(std::string("poll: ") + std::strerror(errno));
    if (ready < 0) continue;
    ipc::v1::ForkServerReply r;
    RETURN_IF_ERROR(Receive(&r));
    if (r.has_forked()) return pid_t(r.forked().pid());
    if (r.has_error()) return Internal("forkserver: " + r.error().message());
    if (r.has_exited()) pending_.push_back({r.exited().pid(), r.exited().wait_status()});
  }
}

Status ForkServerLauncher::Poll(std::vector<Exit>* exits) {
  exits->insert(exits->end(), pending_.begin(), pending_.end());
  pending_.clear();
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return Status::Ok();
    ipc::v1::ForkServerReply r;
    RETURN_IF_ERROR(Receive(&r));
    if (r.has_exited()) exits->push_back({r.exited().pid(), r.exited().wait_status()});
  }
}

}  // namespace

Status WorkerLauncher::StartAll(uint32_t n, const std::function<void(uint32_t)>& requested,
                                std::vector<pid_t>* pids) {
  for (uint32_t i = 0; i < n; ++i) {
    requested(i);
    ASSIGN_OR_RETURN(pid_t pid, Start(i));
    pids->push_back(pid);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<WorkerLauncher>> MakeLauncher(const LaunchContext& c,
                                                       std::function<int(uint32_t)> forked_body) {
  if (c.spec.start() == "fork")
    return std::unique_ptr<WorkerLauncher>(new ForkLauncher(c, std::move(forked_body)));
  if (c.spec.start() == "spawn") return std::unique_ptr<WorkerLauncher>(new SpawnLauncher(c));
  auto fs = std::make_unique<ForkServerLauncher>(c);
  RETURN_IF_ERROR(fs->Connect());
  return std::unique_ptr<WorkerLauncher>(std::move(fs));
}

}  // namespace shoal
