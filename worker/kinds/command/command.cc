#include "worker/kinds/command/command.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shared/os/process.h"
#include "shared/spec/nodes.h"
#include "shared/spec/spec.h"
#include "worker/launchers.h"
#include "worker/scoreboard.h"

namespace shoal {
namespace {

constexpr int kReportFd = 3;

// A TCP port nothing listened on when asked (the kernel's choice), for rank 0's c10d store.
StatusOr<uint16_t> FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Internal(std::string("socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Internal(std::string("a free port for MASTER_PORT: ") + std::strerror(err));
  return uint16_t(ntohs(a.sin_port));
}

class CommandLauncher : public WorkerLauncher {
 public:
  CommandLauncher(const LaunchContext& c, Scoreboard& board, uint16_t port, ReportReader& reports)
      : c_(c), board_(board), port_(port), reports_(reports), inherited_(CleanEnvironment()) {}

  // Its reports on one pipe (fd 3), its stdout and stderr on another, both read by the leader.
  StatusOr<pid_t> Start(uint32_t rank) override {
    int p[2], o[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
    if (::pipe2(o, O_CLOEXEC) != 0) {
      const int err = errno;
      for (int fd : p) ::close(fd);
      return Internal(std::string("pipe: ") + std::strerror(err));
    }
    const std::vector<std::string> env =
        RankEnvironment(c_.spec, inherited_, rank, port_, kReportFd);
    const std::vector<std::string> argv(c_.spec.command().argv().begin(),
                                        c_.spec.command().argv().end());
    SpawnOptions opts{
        {{o[1], STDOUT_FILENO}, {o[1], STDERR_FILENO}, {p[1], kReportFd}}, false, &env};
    opts.search_path = true;
    if (c_.spec.command().has_cwd()) opts.cwd = &c_.spec.command().cwd();
    StatusOr<pid_t> pid = c_.processes->Spawn(argv, opts);
    ::close(p[1]);
    ::close(o[1]);
    if (!pid.ok()) {
      ::close(p[0]);
      ::close(o[0]);
      return pid;
    }
    board_.slot(rank)->pid.store(*pid);
    rank_of_[*pid] = rank;
    reports_.Add(p[0], board_.slot(rank));
    reports_.AddOutput(o[0], rank);
    if (rank + 1 == c_.spec.workers()) reports_.Start();
    return pid;
  }

  // A rank that exited 0 has finished (its phase, as a built-in worker sets its own).
  Status Poll(std::vector<Exit>* exits) override {
    const size_t before = exits->size();
    RETURN_IF_ERROR(ReapChildren(*c_.children, exits));
    for (size_t i = before; i < exits->size(); ++i) {
      const auto [pid, st] = (*exits)[i];
      auto it = rank_of_.find(pid);
      if (it != rank_of_.end() && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        board_.slot(it->second)->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
    }
    return Status::Ok();
  }

 private:
  LaunchContext c_;
  Scoreboard& board_;
  uint16_t port_;
  ReportReader& reports_;
  std::vector<std::string> inherited_;
  std::map<pid_t, uint32_t> rank_of_;
};

}  // namespace

std::vector<std::string> RankEnvironment(const v1::ExperimentSpec& spec,
                                         const std::vector<std::string>& inherited, uint32_t rank,
                                         uint16_t master_port, int report_fd) {
  std::vector<std::string> env;
  for (const std::string& kv : inherited) {
    const bool devices = kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0 && spec.has_cuda_devices();
    // Shoal's own variables stay with Shoal's processes, but for where to write profiler traces.
    const bool shoals = kv.rfind("SHOAL_", 0) == 0 && kv.rfind("SHOAL_PROFILE_DIR=", 0) != 0;
    if (!shoals && !devices) env.push_back(kv);
  }
  env.insert(env.end(), spec.command().env().begin(), spec.command().env().end());
  // torchrun's variables: across nodes the global rank and world, and node 0's store (`master`,
  // validated); on one node its own loopback and a port the leader found free.
  const uint32_t local = std::max<uint32_t>(1, spec.workers());
  const uint32_t nodes = std::max<uint32_t>(1, spec.nodes());
  std::string addr = "127.0.0.1", port = std::to_string(master_port);
  if (nodes > 1) {
    if (auto m = ParseMaster(spec.master()); m.ok()) {
      addr = m->first;
      port = std::to_string(m->second);
    }
  }
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"RANK", std::to_string(spec.node_rank() * local + rank)},
           {"LOCAL_RANK", std::to_string(rank)},
           {"NODE_RANK", std::to_string(spec.node_rank())},
           {"WORLD_SIZE", std::to_string(nodes * local)},
           {"LOCAL_WORLD_SIZE", std::to_string(local)},
           {"MASTER_ADDR", addr},
           {"MASTER_PORT", port},
           {"SHOAL_REPORT_FD", std::to_string(report_fd)}})
    env.push_back(name + "=" + value);
  if (spec.has_cuda_devices()) env.push_back("CUDA_VISIBLE_DEVICES=" + spec.cuda_devices());
  return env;
}

Status CommandKind::Prepare(LeaderEnv&) {
  ASSIGN_OR_RETURN(master_port_, FreePort());
  return Status::Ok();
}

int CommandKind::RunWorker(WorkerEnv& env, bool) {
  return WorkerFails(env.slot, env.index,
                     "kind command: its workers are its program, not shoal-worker");
}

StatusOr<std::unique_ptr<WorkerLauncher>> CommandKind::Launcher(const LaunchContext& c,
                                                                Scoreboard& board) {
  return std::unique_ptr<WorkerLauncher>(
      std::make_unique<CommandLauncher>(c, board, master_port_, reports_));
}

void CommandKind::Finish(ipc::v1::LeaderResult* result) {
  // Stopped (a cancel): the ranks are killed and shoald's grace period runs; a rank's child that
  // still holds its pipe must not hold the result past it.
  result->set_report_lines_ignored(reports_.Finish(result->has_stop_signal() ? 200 : 2000));
}

}  // namespace shoal
