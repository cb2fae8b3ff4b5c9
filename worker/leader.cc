#include "worker/leader.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "shared/idx.h"
#include "shared/layout.h"
#include "shared/packet.h"
#include "shared/process.h"
#include "shared/shm.h"
#include "shared/spec.h"
#include "worker/training.h"

namespace shoal {
namespace {

using nlohmann::json;

constexpr uint64_t kSyntheticTrain = 6000;
constexpr uint64_t kSyntheticTest = 1000;

class StatusPipe {
 public:
  explicit StatusPipe(int fd) : fd_(fd) {}
  void Emit(const json& j) {
    std::string line = j.dump() + "\n";
    const char* p = line.data();
    size_t left = line.size();
    while (left > 0 && fd_ >= 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // shoald went away; PR_SET_PDEATHSIG ends us
      p += n;
      left -= static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
};

// Removes the experiment's segments when the leader leaves RunLeader, however it leaves.
// (Forked workers _exit and never run it.) shoald removes them too, in case we are killed.
struct SegmentCleanup {
  std::string prefix;
  ~SegmentCleanup() { RemoveSegments(prefix); }
};

json SlotJson(const WorkerSlot& w, uint32_t i) {
  auto f = [](uint32_t bits) {
    float v = BitsToFloat(bits);
    return std::isfinite(v) ? json(v) : json();
  };
  return {{"index", i},
          {"pid", w.pid.load()},
          {"phase", w.phase.load()},
          {"steps", w.steps.load()},
          {"samples", w.samples.load()},
          {"last_loss", f(w.last_loss_bits.load())},
          {"first_loss", f(w.first_loss_bits.load())},
          {"tail_loss", f(w.tail_loss_bits.load())},
          {"first_step_ns", w.first_step_ns.load()},
          {"requested_ns", w.requested_ns.load()},
          {"heartbeat_ns", w.heartbeat_ns.load()},
          {"data_ns", w.data_ns.load()},
          {"forward_ns", w.forward_ns.load()},
          {"backward_ns", w.backward_ns.load()},
          {"optimizer_ns", w.optimizer_ns.load()},
          {"train_ns", w.train_ns.load()},
          {"eval_ns", w.eval_ns.load()},
          {"vmhwm_bytes", w.vmhwm_bytes.load()},
          {"weights_checksum", Hex64(w.weights_checksum.load())},
          {"accuracy", f(w.accuracy_bits.load())}};
}

// Loads the data set named by the spec into a new shared segment.
StatusOr<ShmSegment> LoadData(const v1::ExperimentSpec& spec, const std::string& name) {
  if (spec.dataset() == "synthetic") {
    DataHeader h = PlanData(kSyntheticTrain, kSyntheticTest, 28, 28);
    ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, h.total_bytes));
    std::memcpy(seg.data(), &h, sizeof h);
    FillSynthetic(kSyntheticTrain, kSyntheticTest, spec.seed(), h,
                  static_cast<uint8_t*>(seg.data()));
    return seg;
  }
  ASSIGN_OR_RETURN(MnistSet set, LoadMnistDir(spec.dataset()));
  DataHeader h = PlanData(set.train_images.count(), set.test_images.count(), set.rows, set.cols);
  ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, h.total_bytes));
  auto* base = static_cast<uint8_t*>(seg.data());
  std::memcpy(base, &h, sizeof h);
  std::memcpy(base + h.train_images, set.train_images.data.data(), set.train_images.data.size());
  std::memcpy(base + h.train_labels, set.train_labels.data.data(), set.train_labels.data.size());
  if (h.n_test > 0) {
    std::memcpy(base + h.test_images, set.test_images.data.data(), set.test_images.data.size());
    std::memcpy(base + h.test_labels, set.test_labels.data.data(), set.test_labels.data.size());
  }
  return seg;
}

// Starts workers by the experiment's start method and reports how they end.
class WorkerLauncher {
 public:
  struct Exit {
    pid_t pid;
    int status;  // waitpid status
  };
  virtual ~WorkerLauncher() = default;
  virtual StatusOr<pid_t> Start(uint32_t index) = 0;
  // Starts workers 0..n-1, calling `requested(i)` just before asking for worker i; pids[i] is
  // set for each worker started. Stops at the first failure.
  virtual Status StartAll(uint32_t n, const std::function<void(uint32_t)>& requested,
                          std::vector<pid_t>* pids) {
    for (uint32_t i = 0; i < n; ++i) {
      requested(i);
      ASSIGN_OR_RETURN(pid_t pid, Start(i));
      pids->push_back(pid);
    }
    return Status::Ok();
  }
  // Workers that ended since the last call. A non-OK status: we lost track of them.
  virtual Status Poll(std::vector<Exit>* exits) = 0;
};

Status ReapChildren(std::vector<WorkerLauncher::Exit>* exits) {
  int st = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &st, WNOHANG)) > 0) exits->push_back({pid, st});
  return Status::Ok();
}

// fork: the child inherits the model (bound to the segment when shared) and the data mapping.
class ForkLauncher : public WorkerLauncher {
 public:
  ForkLauncher(const LeaderArgs& a, ConvNet model, DataView data, void* board, int lifetime_fd,
               int lifetime_write_fd)
      : a_(a),
        model_(std::move(model)),
        data_(data),
        board_(board),
        lifetime_fd_(lifetime_fd),
        lifetime_write_fd_(lifetime_write_fd) {}
  StatusOr<pid_t> Start(uint32_t index) override {
    const pid_t leader = getpid();
    pid_t pid = ::fork();
    if (pid < 0) return Internal(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      ::signal(SIGTERM, SIG_DFL);  // the leader's cleanup handler is not the worker's
      DieWithParent(leader);
      ::close(a_.status_fd);  // only the leader reports to shoald: its EOF means the leader is gone
      ::close(lifetime_write_fd_);  // or the pipe would never read EOF while we live
      int rc = 1;
      try {
        ApplyAllocatorPolicy(a_.spec.allocator());
        WorkerContext ctx{a_.spec, index, model_, data_, board_, lifetime_fd_};
        rc = TrainWorker(ctx);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "worker %u: %s\n", index, e.what());
      }
      _exit(rc);
    }
    return pid;
  }
  Status Poll(std::vector<Exit>* exits) override { return ReapChildren(exits); }

 private:
  const LeaderArgs& a_;
  ConvNet model_;
  DataView data_;
  void* board_;
  int lifetime_fd_;
  int lifetime_write_fd_;
};

// spawn: a fresh shoal-worker process that attaches to the segments by name.
class SpawnLauncher : public WorkerLauncher {
 public:
  SpawnLauncher(const LeaderArgs& a, int lifetime_fd) : a_(a), lifetime_fd_(lifetime_fd) {}
  StatusOr<pid_t> Start(uint32_t index) override {
    return SpawnProcess({a_.worker_bin, "--role", "worker", "--experiment", a_.experiment_id,
                         "--index", std::to_string(index), "--spec-json", SpecToJson(a_.spec),
                         "--parent", std::to_string(getpid()), "--lifetime-fd", "4"},
                        {{{lifetime_fd_, 4}}, false});
  }
  Status Poll(std::vector<Exit>* exits) override { return ReapChildren(exits); }

 private:
  const LeaderArgs& a_;
  int lifetime_fd_;
};

// forkserver: the zygote forks the worker, which joins our process group; the zygote reports
// the worker's exit to us, since it and not we is the parent.
class ForkServerLauncher : public WorkerLauncher {
 public:
  ForkServerLauncher(const LeaderArgs& a, int lifetime_fd) : a_(a), lifetime_fd_(lifetime_fd) {}
  ~ForkServerLauncher() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Connect() {
    // shoald restarts a dead zygote; give a fresh one a moment to listen.
    Status last;
    for (int i = 0; i < 100; ++i) {
      auto fd = ConnectPacket(a_.zygote_socket);
      if (fd.ok()) {
        fd_ = *fd;
        return Status::Ok();
      }
      last = fd.status();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Unavailable("fork-server not reachable: " + last.message());
  }
  // All requests go out before the first reply is read: the zygote forks while we wait.
  // At most kWindow requests are in flight, so neither side's socket buffer can fill up while
  // the other is blocked sending.
  Status StartAll(uint32_t n, const std::function<void(uint32_t)>& requested,
                  std::vector<pid_t>* pids) override {
    constexpr uint32_t kWindow = 32;
    uint32_t sent = 0;
    while (pids->size() < n) {
      while (sent < n && sent - pids->size() < kWindow) {
        requested(sent);
        RETURN_IF_ERROR(Request(sent++));
      }
      ASSIGN_OR_RETURN(pid_t pid, Reply());
      pids->push_back(pid);
    }
    return Status::Ok();
  }
  StatusOr<pid_t> Start(uint32_t index) override {
    RETURN_IF_ERROR(Request(index));
    return Reply();
  }
  Status Request(uint32_t index) {
    json req = {{"op", "fork"},        {"experiment", a_.experiment_id},
                {"index", index},      {"spec", SpecToJson(a_.spec)},
                {"pgid", ::getpgrp()}, {"leader", getpid()}};
    return SendPacket(fd_, req.dump(), {lifetime_fd_});
  }
  // Replies come in request order; exits of earlier workers may arrive in between.
  StatusOr<pid_t> Reply() {
    for (;;) {
      std::string msg;
      RETURN_IF_ERROR(RecvPacket(fd_, &msg));
      json j = json::parse(msg, nullptr, false);
      const std::string op = j.is_object() ? j.value("op", "") : "";
      if (op == "forked") return pid_t(j.value("pid", 0));
      if (op == "error") return Internal("fork-server: " + j.value("message", std::string("?")));
      if (op == "exit") pending_.push_back({j.value("pid", 0), j.value("status", 0)});
    }
  }
  Status Poll(std::vector<Exit>* exits) override {
    exits->insert(exits->end(), pending_.begin(), pending_.end());
    pending_.clear();
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0) return Status::Ok();
      std::string msg;
      RETURN_IF_ERROR(RecvPacket(fd_, &msg));
      json j = json::parse(msg, nullptr, false);
      if (j.is_object() && j.value("op", "") == "exit") {
        exits->push_back({j.value("pid", 0), j.value("status", 0)});
      }
    }
  }

 private:
  const LeaderArgs& a_;
  int lifetime_fd_;
  int fd_ = -1;
  std::vector<Exit> pending_;
};

int Leader(const LeaderArgs& a, StatusPipe& out) {
  const auto& spec = a.spec;
  // The leader must never start an intra-op pool: forked children would inherit a dead one.
  at::set_num_threads(1);
  SegmentCleanup cleanup{SegmentPrefix(a.experiment_id)};
  auto fail = [&](const std::string& why) {
    out.Emit({{"type", "error"}, {"message", why}});
    return 1;
  };

  auto data_seg = LoadData(spec, SegmentName(a.experiment_id, "data"));
  if (!data_seg.ok()) return fail(data_seg.status().message());
  DataView data{static_cast<const DataHeader*>(data_seg->data()),
                static_cast<const uint8_t*>(data_seg->data())};
  out.Emit({{"type", "segment"}, {"what", "data"}, {"bytes", data_seg->size()}});

  const uint32_t workers = spec.workers();
  auto board_seg =
      ShmSegment::Create(SegmentName(a.experiment_id, "scoreboard"), BoardBytes(workers));
  if (!board_seg.ok()) return fail(board_seg.status().message());
  auto* board = new (board_seg->data()) BoardHeader();
  board->magic = kBoardMagic;
  board->version = kLayoutVersion;
  board->workers = workers;
  for (uint32_t i = 0; i < workers; ++i) {
    auto* slot = new (BoardSlot(board_seg->data(), i)) WorkerSlot();
    slot->accuracy_bits.store(FloatToBits(std::nanf("")));
  }
  out.Emit({{"type", "segment"}, {"what", "scoreboard"}, {"bytes", board_seg->size()}});

  torch::manual_seed(spec.seed());
  ConvNet model;
  auto plan = PlanWeights(ModelTensors(*model));
  if (!plan.ok()) return fail(plan.status().message());
  auto weights_seg = ShmSegment::Create(SegmentName(a.experiment_id, "weights"), plan->total_bytes);
  if (!weights_seg.ok()) return fail(weights_seg.status().message());
  std::memcpy(weights_seg->data(), &plan.value(), sizeof(WeightsHeader));
  CopyParamsToSegment(*model, *plan, weights_seg->data());
  const uint64_t initial = SegmentChecksum(*plan, weights_seg->data());
  if (spec.share()) {
    Status st = BindParamsToSegment(*model, *plan, weights_seg->data());
    if (!st.ok()) return fail(st.message());
  }
  // With sharing off the segment is only where spawned workers copy their initial weights from.
  out.Emit({{"type", "segment"}, {"what", "weights"}, {"bytes", weights_seg->size()}});

  // The lifetime pipe: workers watch the read end and leave when we are gone, whoever their
  // parent is (a forkserver worker's parent is the zygote).
  int lifetime[2];
  if (::pipe2(lifetime, O_CLOEXEC) != 0) return fail(std::string("pipe: ") + std::strerror(errno));
  std::unique_ptr<WorkerLauncher> launcher;
  if (spec.start() == "fork") {
    launcher =
        std::make_unique<ForkLauncher>(a, model, data, board_seg->data(), lifetime[0], lifetime[1]);
  } else if (spec.start() == "spawn") {
    launcher = std::make_unique<SpawnLauncher>(a, lifetime[0]);
  } else {
    auto fs = std::make_unique<ForkServerLauncher>(a, lifetime[0]);
    Status st = fs->Connect();
    if (!st.ok()) return fail(st.message());
    launcher = std::move(fs);
  }

  std::map<pid_t, uint32_t> live;
  std::vector<json> exits;
  std::string failure;
  std::vector<pid_t> pids;
  // Stalls are judged on the monotonic clock (a wall-clock step must not kill or hide them).
  std::vector<uint64_t> requested_mono(workers, 0);
  Status started = launcher->StartAll(
      workers,
      [&](uint32_t i) {
        BoardSlot(board_seg->data(), i)->requested_ns.store(RealtimeNs());
        requested_mono[i] = MonotonicNs();
      },
      &pids);
  for (uint32_t i = 0; i < pids.size(); ++i) {
    live[pids[i]] = i;
    out.Emit({{"type", "worker"}, {"index", i}, {"pid", pids[i]}});
  }
  if (!started.ok()) {
    failure = "starting worker " + std::to_string(pids.size()) + ": " + started.message();
  }
  ::close(lifetime[0]);  // the workers hold it now

  // Watch the workers: collect exits, detect stalls, stop everyone on the first failure.
  const auto interval = std::chrono::milliseconds(spec.sample_interval_ms());
  const uint64_t stall_ns = uint64_t(spec.stall_timeout_ms()) * 1000000ull;
  auto next_report = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point kill_at{};
  bool stopping = false;
  auto stop_all = [&](const std::string& why) {
    if (stopping) return;
    failure = why;
    stopping = true;
    for (auto& [p, j] : live) ::kill(p, SIGTERM);
    kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  };
  if (!failure.empty()) {
    const std::string why = failure;
    stop_all(why);
  }
  while (!live.empty()) {
    std::vector<WorkerLauncher::Exit> ended;
    Status polled = launcher->Poll(&ended);
    if (!polled.ok()) {
      // The fork-server went away; its workers die with it (PR_SET_PDEATHSIG).
      stop_all("lost the fork-server: " + polled.message());
      for (auto& [p, j] : live) ::kill(p, SIGKILL);
      break;
    }
    for (const auto& x : ended) {
      auto it = live.find(x.pid);
      if (it == live.end()) continue;
      const uint32_t i = it->second;
      live.erase(it);
      const int st = x.status;
      exits.push_back({{"index", i},
                       {"pid", x.pid},
                       {"exit_code", WIFEXITED(st) ? WEXITSTATUS(st) : -1},
                       {"signal", WIFSIGNALED(st) ? WTERMSIG(st) : 0}});
      out.Emit(
          {{"type", "exit"}, {"index", i}, {"pid", x.pid}, {"status", DescribeWaitStatus(st)}});
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        stop_all("worker " + std::to_string(i) + " " + DescribeWaitStatus(st));
      }
    }
    if (live.empty()) break;
    const auto now = std::chrono::steady_clock::now();
    if (!stopping) {
      const uint64_t t = MonotonicNs();
      for (auto& [p, i] : live) {
        const WorkerSlot* w = BoardSlot(board_seg->data(), i);
        if (w->phase.load() == static_cast<uint32_t>(WorkerPhase::kFinished)) continue;
        const uint64_t beat = std::max(w->heartbeat_ns.load(), requested_mono[i]);
        if (t > beat + stall_ns) {
          ::kill(p, SIGKILL);  // a stopped or wedged process does not act on SIGTERM
          stop_all("worker " + std::to_string(i) + " stalled (no heartbeat for " +
                   std::to_string(spec.stall_timeout_ms()) + " ms)");
          break;
        }
      }
    }
    if (stopping && now >= kill_at) {
      for (auto& [p, j] : live) ::kill(p, SIGKILL);
    }
    if (now >= next_report) {
      json ws = json::array();
      for (uint32_t i = 0; i < workers; ++i) {
        ws.push_back(SlotJson(*BoardSlot(board_seg->data(), i), i));
      }
      out.Emit({{"type", "progress"}, {"workers", ws}});
      next_report = now + interval;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::close(lifetime[1]);

  json ws = json::array();
  for (uint32_t i = 0; i < workers; ++i)
    ws.push_back(SlotJson(*BoardSlot(board_seg->data(), i), i));
  out.Emit({{"type", "result"},
            {"ok", failure.empty()},
            {"error", failure},
            {"workers", ws},
            {"exits", exits},
            {"initial_checksum", Hex64(initial)},
            {"final_checksum", Hex64(SegmentChecksum(*plan, weights_seg->data()))},
            {"weights_bytes", weights_seg->size()},
            {"data_bytes", data_seg->size()},
            {"board_bytes", board_seg->size()},
            {"leader_vmhwm_bytes", SelfVmHwm()},
            {"has_test_set", data.header->n_test > 0}});
  return failure.empty() ? 0 : 1;
}

}  // namespace

// Paths of the experiment's segments, for the SIGTERM handler (which may only make
// async-signal-safe calls: unlink and kill are).
static char g_segment_paths[3][256];

static void OnTerminate(int) {
  for (const char* p : g_segment_paths) ::unlink(p);
  ::kill(-::getpgrp(), SIGKILL);  // every worker of the experiment, and us
}

int RunLeader(const LeaderArgs& a) {
  // SIGTERM comes from a cancel, or from the kernel when shoald dies (even by SIGKILL): either
  // way the leader removes the segments and takes the whole process group down with it, so
  // nothing is left in /dev/shm even when no shoald is there to clean up.
  int k = 0;
  for (const char* what : {"data", "weights", "scoreboard"}) {
    std::snprintf(g_segment_paths[k++], sizeof g_segment_paths[0], "/dev/shm/%s",
                  SegmentName(a.experiment_id, what).c_str());
  }
  struct sigaction sa {};
  sa.sa_handler = OnTerminate;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  DieWithParent(a.parent, SIGTERM);
  ::fcntl(a.status_fd, F_SETFD, FD_CLOEXEC);  // spawned workers must not hold it
  StatusPipe out(a.status_fd);
  out.Emit({{"type", "leader"}, {"pid", getpid()}});
  try {
    return Leader(a, out);
  } catch (const std::exception& e) {
    out.Emit({{"type", "error"}, {"message", std::string("leader: ") + e.what()}});
    return 1;
  }
}

int RunAttachedWorker(const v1::ExperimentSpec& spec, const std::string& id, uint32_t index,
                      int lifetime_fd, ConvNet prototype) {
  auto report = [&](const std::string& m) {
    std::fprintf(stderr, "worker %u: %s\n", index, m.c_str());
    return 1;
  };
  try {
    ApplyAllocatorPolicy(spec.allocator());
    auto data_seg = ShmSegment::Open(SegmentName(id, "data"), false);
    auto board_seg = ShmSegment::Open(SegmentName(id, "scoreboard"), true);
    auto weights_seg = ShmSegment::Open(SegmentName(id, "weights"), spec.share());
    for (const Status& s : {data_seg.status(), board_seg.status(), weights_seg.status()}) {
      if (!s.ok()) return report(s.message());
    }
    auto* dh = static_cast<const DataHeader*>(data_seg->data());
    auto* wh = static_cast<const WeightsHeader*>(weights_seg->data());
    for (const Status& s :
         {ValidateData(*dh, data_seg->size()), ValidateWeights(*wh, weights_seg->size())}) {
      if (!s.ok()) return report(s.message());
    }
    at::set_num_threads(1);
    ConvNet model = prototype ? prototype : ConvNet();
    if (spec.share()) {
      Status s = BindParamsToSegment(*model, *wh, weights_seg->data());
      if (!s.ok()) return report(s.message());
    } else {
      // A private copy: take the initial weights and let go of the segment, so this worker
      // cannot quietly train the shared copy (torch.multiprocessing's spawn pitfall).
      CopyParamsFromSegment(*model, *wh, weights_seg->data());
      weights_seg->Unmap();
    }
    WorkerContext ctx{spec,
                      index,
                      model,
                      DataView{dh, static_cast<const uint8_t*>(data_seg->data())},
                      board_seg->data(),
                      lifetime_fd};
    return TrainWorker(ctx);
  } catch (const std::exception& e) {
    return report(e.what());
  }
}

int RunSpawnedWorker(const SpawnedWorkerArgs& a) {
  DieWithParent(a.parent);
  return RunAttachedWorker(a.spec, a.experiment_id, a.index, a.lifetime_fd);
}

}  // namespace shoal
