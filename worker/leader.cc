#include "worker/leader.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "shared/idx.h"
#include "shared/layout.h"
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

int ForkedWorkerMain(const LeaderArgs& a, uint32_t index, pid_t leader, ConvNet model,
                     const DataView& data, void* board) {
  DieWithParent(leader);
  try {
    ApplyAllocatorPolicy(a.spec.allocator());
    WorkerContext ctx{a.spec, index, std::move(model), data, board};
    return TrainWorker(ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %u: %s\n", index, e.what());
    return 1;
  }
}

int Leader(const LeaderArgs& a, StatusPipe& out) {
  const auto& spec = a.spec;
  const pid_t self = getpid();
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

  std::map<pid_t, uint32_t> live;
  std::vector<json> exits;
  std::string failure;
  for (uint32_t i = 0; i < workers; ++i) {
    pid_t pid = -1;
    if (spec.start() == "fork") {
      pid = ::fork();
      if (pid == 0) _exit(ForkedWorkerMain(a, i, self, model, data, board_seg->data()));
      if (pid < 0) failure = std::string("fork failed: ") + std::strerror(errno);
    } else {
      auto spawned = SpawnProcess(
          {a.worker_bin, "--role", "worker", "--experiment", a.experiment_id, "--index",
           std::to_string(i), "--spec-json", SpecToJson(spec), "--parent", std::to_string(self)},
          {});
      if (spawned.ok()) {
        pid = *spawned;
      } else {
        failure = spawned.status().message();
      }
    }
    if (pid <= 0) break;
    live[pid] = i;
    out.Emit({{"type", "worker"}, {"index", i}, {"pid", pid}});
  }

  // Watch the workers: reap exits, stop everyone on the first failure, report progress.
  const auto interval = std::chrono::milliseconds(spec.sample_interval_ms());
  auto next_report = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point kill_at{};
  bool stopping = !failure.empty();
  if (stopping) {
    for (auto& [pid, i] : live) ::kill(pid, SIGTERM);
    kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  }
  while (!live.empty()) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      auto it = live.find(pid);
      if (it == live.end()) continue;
      const uint32_t i = it->second;
      live.erase(it);
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      exits.push_back({{"index", i},
                       {"pid", pid},
                       {"exit_code", WIFEXITED(st) ? WEXITSTATUS(st) : -1},
                       {"signal", WIFSIGNALED(st) ? WTERMSIG(st) : 0}});
      out.Emit({{"type", "exit"}, {"index", i}, {"pid", pid}, {"status", DescribeWaitStatus(st)}});
      if (!ok && !stopping) {
        failure = "worker " + std::to_string(i) + " " + DescribeWaitStatus(st);
        stopping = true;
        for (auto& [p, j] : live) ::kill(p, SIGTERM);
        kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      }
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (stopping && now >= kill_at) {
      for (auto& [p, j] : live) ::kill(p, SIGKILL);
    }
    if (now >= next_report) {
      json ws = json::array();
      for (uint32_t i = 0; i < workers; ++i)
        ws.push_back(SlotJson(*BoardSlot(board_seg->data(), i), i));
      out.Emit({{"type", "progress"}, {"workers", ws}});
      next_report = now + interval;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

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

int RunLeader(const LeaderArgs& a) {
  DieWithParent(a.parent);
  StatusPipe out(a.status_fd);
  out.Emit({{"type", "leader"}, {"pid", getpid()}});
  try {
    return Leader(a, out);
  } catch (const std::exception& e) {
    out.Emit({{"type", "error"}, {"message", std::string("leader: ") + e.what()}});
    return 1;
  }
}

int RunSpawnedWorker(const SpawnedWorkerArgs& a) {
  DieWithParent(a.parent);
  try {
    ApplyAllocatorPolicy(a.spec.allocator());
    auto data_seg = ShmSegment::Open(SegmentName(a.experiment_id, "data"), false);
    auto board_seg = ShmSegment::Open(SegmentName(a.experiment_id, "scoreboard"), true);
    auto weights_seg = ShmSegment::Open(SegmentName(a.experiment_id, "weights"), a.spec.share());
    for (const Status& s : {data_seg.status(), board_seg.status(), weights_seg.status()}) {
      if (!s.ok()) {
        std::fprintf(stderr, "worker %u: %s\n", a.index, s.message().c_str());
        return 1;
      }
    }
    auto* dh = static_cast<const DataHeader*>(data_seg->data());
    auto* wh = static_cast<const WeightsHeader*>(weights_seg->data());
    for (const Status& s :
         {ValidateData(*dh, data_seg->size()), ValidateWeights(*wh, weights_seg->size())}) {
      if (!s.ok()) {
        std::fprintf(stderr, "worker %u: %s\n", a.index, s.message().c_str());
        return 1;
      }
    }
    at::set_num_threads(1);
    ConvNet model;
    if (a.spec.share()) {
      Status s = BindParamsToSegment(*model, *wh, weights_seg->data());
      if (!s.ok()) {
        std::fprintf(stderr, "worker %u: %s\n", a.index, s.message().c_str());
        return 1;
      }
    } else {
      // A private copy: take the initial weights and let go of the segment, so this worker
      // cannot quietly train the shared copy (torch.multiprocessing's spawn pitfall).
      CopyParamsFromSegment(*model, *wh, weights_seg->data());
      weights_seg->Unmap();
    }
    WorkerContext ctx{a.spec, a.index, model,
                      DataView{dh, static_cast<const uint8_t*>(data_seg->data())},
                      board_seg->data()};
    return TrainWorker(ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker %u: %s\n", a.index, e.what());
    return 1;
  }
}

}  // namespace shoal
