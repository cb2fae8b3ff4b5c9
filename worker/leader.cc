#include "worker/leader.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "shared/ipc/ipc_codec.h"
#include "shared/kinds/kind.h"
#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "shared/os/shm.h"
#include "shared/spec/spec.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "worker/launchers.h"
#include "worker/scoreboard.h"
#include "worker/supervisor.h"

namespace shoal {
namespace {

using ipc::v1::LeaderEvent;

// A stop signal (a cancel's SIGTERM) that came from the supervisor's start until the result is
// sent: it ends the run through the supervisor, which kills the workers and reads their figures
// at that moment, then the handler's cleanup runs (RunLeader). Before, it cleans up at once.
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_supervising = 0;

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

// The kind's reader of its area of each slot; nullptr: it keeps none.
KindBoardReader KindAreaReader(const v1::ExperimentSpec& spec) {
  const KindRules* kind = FindKind(spec.kind());
  return kind == nullptr ? nullptr : kind->read_board;
}

ipc::v1::Progress ReadBoard(const Scoreboard& board, uint32_t workers, bool final,
                            KindBoardReader kind_area) {
  ipc::v1::Progress p;
  for (uint32_t i = 0; i < workers; ++i)
    *p.add_workers() = ReadSlot(*board.slot(i), i, final, kind_area);
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
  if (const auto uss = OwnUssPeak()) e.mutable_self_memory()->set_uss_bytes(*uss);
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
  h->step_slots = kind.StepSlots(spec);  // turns at the steps, where the kind takes them
  return supervised;
}

// What the supervisor reports as the run goes: worker exits and the board's progress, to shoald.
WorkerSupervisor::Hooks SupervisorHooks(StatusPipe& out, const Scoreboard& board, uint32_t workers,
                                        KindBoardReader kind_area,
                                        std::optional<uint64_t> oom_kills_before) {
  WorkerSupervisor::Hooks hooks;
  hooks.oom_kills = ReadOomKills;
  hooks.oom_kills_before = oom_kills_before;
  hooks.exited = [&out](const ipc::v1::WorkerExited& x) {
    LeaderEvent e;
    *e.mutable_worker_exited() = x;
    out.Emit(e);
  };
  hooks.stop_signal = [] { return int(g_stop_signal); };
  hooks.progress = [&out, &board, workers, kind_area] {
    LeaderEvent e;
    *e.mutable_progress() = ReadBoard(board, workers, false, kind_area);
    e.mutable_progress()->set_tracing(Tracing(board));
    out.Emit(e);
  };
  return hooks;
}

// shoal-worker's leader, its kind prepared where no worker inherits its model (shared/spec
// ChooseLeader hands_off): it execs shoal-leader on the same pid, so shoald's pipe, process
// record and sampler carry on, and the run is supervised by a leader that holds no LibTorch (a
// model file's leader kept ~90 MiB of PSS for the run after letting its module go). What it
// prepared goes through a pipe as one LeaderHandOff. Returns only when the exec failed.
Status HandOff(const LeaderArgs& a, const WorkerKind& kind, ipc::v1::LeaderHandOff* h,
               StatusPipe& out) {
  if (const std::optional<StepBounds> b = kind.Bounds()) {
    h->set_step_bound_ms(b->steps_ms);
    h->set_warm_up_bound_ms(b->warm_up_ms);
    h->set_step_bound_why(b->why);
  }
  kind.HandOff(h);
  h->set_vmhwm_bytes(SelfVmHwm());
  ReportOwnMemory(out);  // this image's peak (the probe's), which the exec's image never sees
  const std::string frame = EncodeFrame(*h);
  int p[2];
  if (frame.size() > 32768)  // it must fit the pipe's buffer: nobody reads it until the exec
    return Internal("hand-off: " + std::to_string(frame.size()) + " bytes");
  if (::pipe2(p, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  const bool written = WriteAll(p[1], frame);
  ::close(p[1]);
  if (!written) {
    ::close(p[0]);
    return Internal("hand-off: write to its pipe failed");
  }
  ::fcntl(p[0], F_SETFD, 0);  // the exec'd leader's to read, as are shoald's pipe and the log
  ::fcntl(a.status_fd, F_SETFD, 0);
  std::vector<std::string> args = LeaderArgv({a.leader_bin, a.experiment_id, a.status_fd,
                                              int(a.parent), a.worker_bin, a.fork_server_socket},
                                             a.spec);
  args.insert(args.end(), {"--hand-off-fd", std::to_string(p[0])});
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ::execv(a.leader_bin.c_str(), argv.data());
  const int err = errno;
  ::fcntl(a.status_fd, F_SETFD, FD_CLOEXEC);
  ::close(p[0]);
  return Internal("exec " + a.leader_bin + ": " + std::strerror(err));
}

int Leader(const LeaderArgs& a, WorkerKind& kind, StatusPipe& out) {
  const auto& spec = a.spec;
  SegmentCleanup cleanup{SegmentPrefix(a.experiment_id)};
  ipc::v1::LeaderHandOff hand_off;  // what shoal-leader needs, should this process hand off
  auto segment = [&](const std::string& what, uint64_t bytes) {
    LeaderEvent e;
    e.mutable_segment()->set_what(what);
    e.mutable_segment()->set_bytes(bytes);
    *hand_off.add_segments() = e.segment();
    out.Emit(e);
  };
  LeaderEnv env{spec, a.experiment_id, segment, [&out](const std::string& m) { out.Error(m); }};
  if (Status st = kind.Prepare(env); !st.ok()) return Fail(out, st.message());
  if (!a.leader_bin.empty() && ChooseLeader(spec).hands_off) {
    Status st = HandOff(a, kind, &hand_off, out);  // returns only when the exec failed
    return Fail(out, st.message());
  }
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

  RealClock clock;  // the workers' slots hold MonotonicNs() readings
  WorkerSupervisor sup(
      supervised, *board, **launcher, *lc.processes, clock,
      SupervisorHooks(out, *board, spec.workers(), KindAreaReader(spec), oom_kills_before));
  g_supervising = 1;  // until RunLeader's end: a stop while the result is built still waits for it
  const std::string failure =
      sup.Run(started.live, std::move(started.requested_mono), started.failure);
  ::close(lifetime[1]);

  LeaderEvent e;
  auto* r = e.mutable_result();
  r->set_ok(failure.empty());
  r->set_error(failure);
  *r->mutable_workers() = ReadBoard(*board, spec.workers(), true, KindAreaReader(spec)).workers();
  for (const auto& x : sup.exits()) *r->add_exits() = x;
  // Told to stop while Run watched, or since: what the kind's Finish waits for may be cut short.
  if (g_stop_signal != 0) r->set_stop_signal(g_stop_signal);
  if (bounds) {  // the kind set its own
    r->set_step_bound_ms(bounds->steps_ms);
    r->set_step_bound_why(bounds->why);
  }
  // The exec of a hand-off began a new high-water mark: the process's is the higher.
  r->set_leader_vmhwm_bytes(
      std::max(SelfVmHwm(), a.handed_off ? a.handed_off->vmhwm_bytes() : uint64_t(0)));
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

void Cleanup() {
  for (const char* p : g_segment_paths)
    if (p[0] != '\0') ::unlink(p);
  ::kill(-::getpgrp(), SIGKILL);  // every worker of the experiment, and us
}

void OnTerminate(int sig) {
  // Told to stop while supervising: the supervisor ends the run and its result is sent first.
  // A second signal changes nothing (shoald's SIGTERM reaches the group, then each process of
  // the run's cgroup); SIGALRM, 5 s on, cleans up whatever the supervisor is doing.
  if (sig != SIGALRM && (g_supervising != 0 || g_stop_signal != 0)) {
    if (g_stop_signal == 0) {
      g_stop_signal = sig;
      ::alarm(5);
    }
    return;
  }
  Cleanup();
}

// SIGTERM comes from a cancel, or from the kernel when shoald dies (even by SIGKILL): either way
// the leader removes the segments and takes the whole process group down with it, so nothing is
// left in /dev/shm even when no shoald is there to clean up. SIGHUP (with SIGCONT) is what the
// kernel sends a process group orphaned by shoald's death while one of its processes is stopped,
// and it may come first: it gets the same handling, as does SIGINT. While the supervisor watches
// the workers, the signal first goes through it (the workers are killed and the result holds
// their figures at the stop) and the cleanup follows the result, within 5 s at most (SIGALRM).
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
  for (int sig : {SIGTERM, SIGHUP, SIGINT, SIGALRM}) ::sigaction(sig, &sa, nullptr);
  // A write to shoald's pipe after shoald died must fail (EPIPE), not kill us by SIGPIPE before
  // the kernel's SIGTERM arrives: that death would skip the cleanup above.
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace

StatusOr<ipc::v1::LeaderHandOff> ReadHandOff(int fd) {
  FrameReader reader;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return DataLoss(std::string("hand-off: read: ") + std::strerror(err));
    }
    reader.Feed(buf, size_t(n));
  }
  ::close(fd);
  ipc::v1::LeaderHandOff h;
  ASSIGN_OR_RETURN(bool whole, reader.Next(&h));
  if (!whole || reader.pending() != 0) return DataLoss("hand-off: not one whole message");
  return h;
}

StatusOr<std::unique_ptr<WorkerLauncher>> WorkerKind::Launcher(const LaunchContext&, Scoreboard&) {
  return std::unique_ptr<WorkerLauncher>();  // the start method's
}

int RunLeader(const LeaderArgs& a, const LeaderKindMaker& make) {
  // Into the run's control group before anything is started (the daemon moves it too, after
  // spawning it: this closes the moment between).
  if (Status st = JoinRunCgroup(); !st.ok())
    std::fprintf(stderr, "leader: not in the run's cgroup: %s\n", st.message().c_str());
  const bool adopts = AdoptOrphansWithoutCgroup();
  ::fcntl(a.status_fd, F_SETFD, FD_CLOEXEC);  // spawned workers must not hold it
  StatusPipe out(a.status_fd);
  auto made = make(a.spec);
  if (!made.ok()) return Fail(out, made.status().message());
  std::unique_ptr<WorkerKind> kind = std::move(*made);
  InstallTerminateHandler(a.experiment_id, *kind);
  DieWithParent(a.parent, SIGTERM);
  int code = 1;
  try {
    code = Leader(a, *kind, out);
  } catch (const std::exception& e) {
    out.Error(std::string("leader: ") + e.what());
  }
  if (adopts) EndAdoptedStrays();  // the rest is the run's end: shoald's (issue 58)
  g_supervising = 0;
  if (g_stop_signal != 0) Cleanup();  // its result sent: the group goes now
  return code;
}

}  // namespace shoal
