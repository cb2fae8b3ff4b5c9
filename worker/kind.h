// The worker's half of an experiment kind: what the leader prepares and what each worker process
// runs. The daemon's half (validation, admission, figures) is shared/kinds/kind.h; the runtime
// around both (launching, the scoreboard, supervision, telemetry, the store) knows no kind.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/ipc/layout.h"
#include "shared/status.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

class Scoreboard;
class WorkerLauncher;
struct LaunchContext;

// A kind's own bounds on its run (a model file's, from its probe; worker/model_file.h).
struct StepBounds {
  uint32_t steps_ms = 0;    // no training worker making progress this long fails the run (0: off)
  uint32_t warm_up_ms = 0;  // a worker's warm-up past this fails it (0: none)
  std::string why;
};

struct LeaderEnv {
  const v1::ExperimentSpec& spec;
  std::string experiment_id;
  // Announce a segment the kind created (name from SegmentName(experiment_id, what)).
  std::function<void(const std::string& what, uint64_t bytes)> segment_created;
  // Fails the experiment with `message` at once, from any thread (a stage past its bound, whose
  // thread is stuck in LibTorch); the caller then _exits.
  std::function<void(const std::string& message)> fail_now;
};

struct WorkerEnv {
  const v1::ExperimentSpec& spec;
  std::string experiment_id;
  uint32_t index = 0;
  int lifetime_fd = -1;  // read end of the leader's lifetime pipe: EOF means the leader is gone
  BoardHeader* board = nullptr;
  WorkerSlot* slot = nullptr;
};

class WorkerKind {
 public:
  virtual ~WorkerKind() = default;
  // In the forkserver, once: build and exercise what every worker of this kind needs, so the
  // workers it forks start warm.
  virtual void Warm() {}
  // In the leader, before any worker starts: load the data, create the kind's segments.
  virtual Status Prepare(LeaderEnv& env) = 0;
  // In a worker process; returns its exit code. `forked_from_leader`: the process inherited the
  // leader's prepared state (start method fork); otherwise it attaches to the segments by name.
  virtual int RunWorker(WorkerEnv& env, bool forked_from_leader) = 0;
  // In the leader, after every worker has ended: the kind's part of the result.
  virtual void Finish(ipc::v1::LeaderResult* /*result*/) {}
  // In the leader: a launcher of its own (kind command spawns the user's program); nullptr: the
  // start method's.
  virtual StatusOr<std::unique_ptr<WorkerLauncher>> Launcher(const LaunchContext& c,
                                                             Scoreboard& board);
  // How many workers may be inside a step at once (worker/step_gate.h): all of them unless the
  // kind takes turns (hogwild's concurrent_steps).
  virtual uint32_t StepSlots(const v1::ExperimentSpec& spec) const { return spec.workers(); }
  // True: worker 0 writes the initial weights segment and the others wait for it (the leader
  // builds no model); false: Prepare wrote it before any worker started.
  virtual bool WorkerWritesInitialWeights() const { return false; }
  // In the leader, after Prepare: the bounds on the run's steps without progress (replacing the
  // spec's step_timeout_ms) and on each worker's warm-up (a model file's, from its probe);
  // nullopt: the spec's, and no warm-up bound.
  virtual std::optional<StepBounds> Bounds() const { return std::nullopt; }
  // In shoal-worker's leader, prepared, before it execs shoal-leader (shared/spec ChooseLeader
  // hands_off): the kind's figures shoal-leader's half reports in its place (the bounds, the
  // segments and the memory are the runtime's).
  virtual void HandOff(ipc::v1::LeaderHandOff* /*h*/) const {}
  // Segment names ("data", "weights") Prepare creates, for the leader's SIGTERM cleanup.
  virtual std::vector<std::string> SegmentWhats() const = 0;
};

// A fresh object of the named kind; nullptr when this shoal-worker has no such kind.
std::unique_ptr<WorkerKind> MakeWorkerKind(const std::string& name);
// The kinds this shoal-worker has, in registration order.
std::vector<std::string> WorkerKindNames();
// The leader's kind for a spec: shoal-worker's MakeWorkerKind by the spec's kind, or
// shoal-leader's LibTorch-free one.
using LeaderKindMaker =
    std::function<StatusOr<std::unique_ptr<WorkerKind>>(const v1::ExperimentSpec&)>;
// shoal-worker's: MakeWorkerKind of the spec's kind, NotFound when there is none.
StatusOr<std::unique_ptr<WorkerKind>> MakeWorkerKindFor(const v1::ExperimentSpec& spec);

using WorkerKindFactory = std::function<std::unique_ptr<WorkerKind>()>;
// Adds a kind after the registry's (a test's toy kind), before any worker is made; false when
// the name is taken.
bool RegisterWorkerKind(const std::string& name, WorkerKindFactory make);

// Exit code of a worker that saw its leader go away.
constexpr int kLeaderGoneExit = 75;

}  // namespace shoal
