#include "worker/leader.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "shared/ipc/ipc_codec.h"
#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "shared/os/shm.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "worker/launchers.h"
#include "worker/scoreboard.h"
#include "worker/supervisor.h"

namespace shoal {
namespace {

using ipc::v1::LeaderEvent;

class StatusPipe {
 public:
  explicit StatusPipe(int fd) : fd_(fd) {}
  // A failed write means shoald went away; PR_SET_PDEATHSIG ends us. Locked: a stage's watchdog
  // may report from its own thread (worker/stage_bound.h).
  void Emit(const LeaderEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    (void)WriteFrame(fd_, e);
  }
  void Error(const std::string& message) {
    LeaderEvent e;
    e.mutable_error()->set_message(message);
    Emit(e);
  }

 private:
  int fd_;
  std::mutex mu_;
};

// Sends the leader's error to shoald; the exit code of a leader that failed.
int Fail(StatusPipe& out, const std::string& message) {
  out.Error(message);
  return 1;
}

// Removes the experiment's segments when the leader leaves RunLeader, however it leaves.
// (Forked workers _exit and never run it.) shoald removes them too, in case we are killed.
struct SegmentCleanup {
  std::string prefix;
  ~SegmentCleanup() { RemoveSegments(prefix); }
};

ipc::v1::Progress ReadBoard(const Scoreboard& board, uint32_t workers, bool final) {
  ipc::v1::Progress p;
  for (uint32_t i = 0; i < workers; ++i) *p.add_workers() = ReadSlot(*board.slot(i), i, final);
  return p;
}

struct Started {
  std::map<pid_t, uint32_t> live;
  std::vector<uint64_t> requested_mono;  // stalls are judged on the monotonic clock
  std::string failure;
};

Started StartWorkers(WorkerLauncher& launcher, const Scoreboard& board, uint32_t workers,
                     StatusPipe& out) {
  Started s;
  s.requested_mono.assign(workers, 0);
  std::vector<pid_t> pids;
  Status st = launcher.StartAll(
      workers,
      [&](uint32_t i) {
        board.slot(i)->requested_ns.store(RealtimeNs());
        s.requested_mono[i] = MonotonicNs();
      },
      &pids);
  for (uint32_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;  // its fork failed (later ones may have started)
    s.live[pids[i]] = i;
    LeaderEvent e;
    e.mutable_worker_started()->set_index(i);
    e.mutable_worker_started()->set_pid(pids[i]);
    out.Emit(e);
  }
  const auto failed = std::find(pids.begin(), pids.end(), -1) - pids.begin();  // or the next
  if (!st.ok()) s.failure = "starting worker " + std::to_string(failed) + ": " + st.message();
  return s;
}

// Its PSS peak, read by itself: the data set loaded (noted then), the model built, no worker
// sharing its pages yet; and once more when its workers are gone. The daemon's 200 ms samples
// read a 2-worker fork leader's peak as 147 MiB to an independent reader's 201.
void ReportOwnMemory(StatusPipe& out) {
  NoteOwnPss();
  const std::optional<uint64_t> peak = OwnPssPeak();
  if (!peak) return;
  LeaderEvent e;
  e.mutable_self_memory()->set_pss_bytes(*peak);
  out.Emit(e);
}

// The board's settings from the kind and the spec; the spec the supervisor holds the run to: a
// kind's own bound on the warm-up and the steps (a model file's, from its probe) in place of the
// spec's step timeout.
v1::ExperimentSpec SetUpBoard(const v1::ExperimentSpec& spec, const WorkerKind& kind,
                              const std::optional<StepBounds>& bounds, BoardHeader* h) {
  h->weights_by_worker0 = kind.WorkerWritesInitialWeights() ? 1 : 0;
  v1::ExperimentSpec supervised = spec;
  if (bounds) {
    supervised.set_step_timeout_ms(bounds->steps_ms);
    supervised.set_step_timeout_why(bounds->why);
    h->warm_up_bound_ms = bounds->warm_up_ms;
  }
  // Turns at the steps (worker/step_gate.h): hogwild's concurrent_steps; the other kinds none.
  h->step_slots = spec.has_concurrent_steps() ? std::min(spec.concurrent_steps(), spec.workers())
                                              : spec.workers();
  return supervised;
}

// What the supervisor reports as the run goes: worker exits and the board's progress, to shoald.
WorkerSupervisor::Hooks SupervisorHooks(StatusPipe& out, const Scoreboard& board, uint32_t workers,
                                        std::optional<uint64_t> oom_kills_before) {
  WorkerSupervisor::Hooks hooks;
  hooks.oom_kills = ReadOomKills;
  hooks.oom_kills_before = oom_kills_before;
  hooks.exited = [&out](const ipc::v1::WorkerExited& x) {
    LeaderEvent e;
    *e.mutable_worker_exited() = x;
    out.Emit(e);
  };
  hooks.progress = [&out, &board, workers] {
    LeaderEvent e;
    *e.mutable_progress() = ReadBoard(board, workers, false);
    e.mutable_progress()->set_tracing(Tracing(board));
    out.Emit(e);
  };
  return hooks;
}

int Leader(const LeaderArgs& a, WorkerKind& kind, StatusPipe& out) {
  const auto& spec = a.spec;
  SegmentCleanup cleanup{SegmentPrefix(a.experiment_id)};
  auto segment = [&](const std::string& what, uint64_t bytes) {
    LeaderEvent e;
    e.mutable_segment()->set_what(what);
    e.mutable_segment()->set_bytes(bytes);
    out.Emit(e);
  };
  LeaderEnv env{spec, a.experiment_id, segment, [&out](const std::string& m) { out.Error(m); }};
  if (Status st = kind.Prepare(env); !st.ok()) return Fail(out, st.message());
  auto board = Scoreboard::Create(SegmentName(a.experiment_id, "scoreboard"), spec.workers());
  if (!board.ok()) return Fail(out, board.status().message());
  segment("scoreboard", board->size());
  const std::optional<StepBounds> bounds = kind.Bounds();
  const v1::ExperimentSpec supervised = SetUpBoard(spec, kind, bounds, board->header());

  // The lifetime pipe: workers watch the read end and leave when we are gone, whoever their
  // parent is (a forkserver worker's parent is the forkserver).
  int lifetime[2];
  if (::pipe2(lifetime, O_CLOEXEC) != 0)
    return Fail(out, std::string("pipe: ") + std::strerror(errno));
  LaunchContext lc{spec,        a.experiment_id, a.worker_bin, a.fork_server_socket,
                   lifetime[0], lifetime[1],     a.status_fd};
  auto launcher = kind.Launcher(lc, *board);
  if (launcher.ok() && *launcher == nullptr)
    launcher = MakeLauncher(lc, [&](uint32_t i) {
      WorkerEnv w{spec, a.experiment_id, i, lifetime[0], board->header(), board->slot(i)};
      VolunteerForOomKiller();
      HeartbeatThread beat(w.slot);
      try {
        EndProcessNow(kind.RunWorker(w, /*forked_from_leader=*/true));
      } catch (const std::exception& e) {  // a CUDA out-of-memory, say: the experiment's error
        return WorkerFails(w.slot, i, e.what());
      }
    });
  if (!launcher.ok()) return Fail(out, launcher.status().message());
  const std::optional<uint64_t> oom_kills_before = ReadOomKills();
  ReportOwnMemory(out);
  Started started = StartWorkers(**launcher, *board, spec.workers(), out);
  ::close(lifetime[0]);  // the workers hold it now
  // From here it only supervises: the code it ran to prepare (LibTorch's initialisation, in
  // shoal-worker) is no page its workers share, and no page it needs resident.
  DropCleanFilePages();

  WorkerSupervisor sup(supervised, *board, **launcher,
                       SupervisorHooks(out, *board, spec.workers(), oom_kills_before));
  const std::string failure = sup.Run(started.live, started.requested_mono, started.failure);
  ::close(lifetime[1]);

  LeaderEvent e;
  auto* r = e.mutable_result();
  r->set_ok(failure.empty());
  r->set_error(failure);
  *r->mutable_workers() = ReadBoard(*board, spec.workers(), true).workers();
  for (const auto& x : sup.exits()) *r->add_exits() = x;
  if (bounds) {  // the kind set its own
    r->set_step_bound_ms(bounds->steps_ms);
    r->set_step_bound_why(bounds->why);
  }
  r->set_leader_vmhwm_bytes(SelfVmHwm());
  kind.Finish(r);
  // Again with the workers gone and the result built: the pages they shared are the leader's
  // alone now, so its PSS rises at the very end, often after the daemon's last sample.
  ReportOwnMemory(out);
  out.Emit(e);
  return r->ok() ? 0 : 1;  // Finish may fail the result too (a CUDA download)
}

// Paths of the experiment's segments, for the SIGTERM handler (which may only make
// async-signal-safe calls: unlink and kill are).
constexpr int kMaxSegments = 8;
char g_segment_paths[kMaxSegments][256];

void OnTerminate(int) {
  for (const char* p : g_segment_paths)
    if (p[0] != '\0') ::unlink(p);
  ::kill(-::getpgrp(), SIGKILL);  // every worker of the experiment, and us
}

// SIGTERM comes from a cancel, or from the kernel when shoald dies (even by SIGKILL): either way
// the leader removes the segments and takes the whole process group down with it, so nothing is
// left in /dev/shm even when no shoald is there to clean up. SIGHUP (with SIGCONT) is what the
// kernel sends a process group orphaned by shoald's death while one of its processes is stopped,
// and it may come first: it gets the same handling, as does SIGINT.
void InstallTerminateHandler(const std::string& id, const WorkerKind& kind) {
  std::vector<std::string> whats = kind.SegmentWhats();
  whats.push_back("scoreboard");
  for (size_t k = 0; k < whats.size() && k < kMaxSegments; ++k) {
    std::snprintf(g_segment_paths[k], sizeof g_segment_paths[0], "/dev/shm/%s",
                  SegmentName(id, whats[k]).c_str());
  }
  struct sigaction sa {};
  sa.sa_handler = OnTerminate;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGHUP, SIGINT}) ::sigaction(sig, &sa, nullptr);
  // A write to shoald's pipe after shoald died must fail (EPIPE), not kill us by SIGPIPE before
  // the kernel's SIGTERM arrives: that death would skip the cleanup above.
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

StatusOr<std::unique_ptr<WorkerLauncher>> WorkerKind::Launcher(const LaunchContext&, Scoreboard&) {
  return std::unique_ptr<WorkerLauncher>();  // the start method's
}

int RunLeader(const LeaderArgs& a, const LeaderKindMaker& make) {
  ::fcntl(a.status_fd, F_SETFD, FD_CLOEXEC);  // spawned workers must not hold it
  StatusPipe out(a.status_fd);
  auto made = make(a.spec);
  if (!made.ok()) return Fail(out, made.status().message());
  std::unique_ptr<WorkerKind> kind = std::move(*made);
  InstallTerminateHandler(a.experiment_id, *kind);
  DieWithParent(a.parent, SIGTERM);
  try {
    return Leader(a, *kind, out);
  } catch (const std::exception& e) {
    out.Error(std::string("leader: ") + e.what());
    return 1;
  }
}

}  // namespace shoal
