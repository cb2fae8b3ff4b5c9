// The daemon's core put together: the queue, sweeps above it, the scheduler thread that runs one
// experiment at a time through an ExperimentRunner, the child reaper and the forkserver's
// supervisor. Knows nothing of gRPC.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "server/blob_store.h"
#include "server/child_reaper.h"
#include "server/daemon_seams.h"
#include "server/experiment_queue.h"
#include "server/experiment_runner.h"
#include "server/experiment_service.h"
#include "server/fork_server_supervisor.h"
#include "server/metrics.h"
#include "server/recovery.h"
#include "server/sampler.h"
#include "server/slurm_sweeps.h"
#include "server/store.h"
#include "server/sweep_tracker.h"
#include "server/telemetry_hub.h"
#include "shared/os/os_seams.h"
#include "shared/os/procfs.h"
#include "shared/spec/spec.h"

namespace shoal {

struct CoordinatorOptions {
  std::string worker_bin;  // shoal-worker
  // shoal-leader, for the experiments whose leader needs no LibTorch (ChooseLeader); empty:
  // shoal-worker leads every experiment.
  std::string leader_bin;
  SpecLimits limits;
  SamplerOptions sampler;
  int grace_ms = 3000;                       // SIGTERM -> SIGKILL
  double disturbed_cores = kDisturbedCores;  // outside CPU that marks a run disturbed
  std::string fork_server_socket;            // where the forkserver listens
  std::string logs_dir;                      // each run's captured output (empty: not captured)
  std::string profiles_dir;  // kind command's torch.profiler traces, a folder a run (empty: none)
  uint64_t run_memory_limit_bytes = 0;  // each run's cgroup's memory limit; 0: none
  std::string blobs_dir;                // uploaded files (models), by content hash
  uint64_t max_upload_bytes = 1ull << 30;
  // An uploaded file no record uses is removed (rm, prune) once this long has passed since it
  // was last uploaded: a file uploaded for a submit still on its way stays.
  uint32_t upload_grace_s = 3600;
  uint32_t fork_server_pool = 16;
  // Kind command (a caller's own program, run as shoald's user) is refused unless this is set.
  bool allow_commands = false;
  size_t max_queued = ExperimentQueue::kDefaultMaxQueued;  // experiments waiting at once
  // This daemon's machine, written into every experiment it runs (Experiment.host).
  std::optional<v1::Host> host;
  // Sweeps placed on Slurm (`--slurm`): what each array task runs and where its files go, and how
  // often the arrays are looked at (one scontrol each).
  SlurmSweepOptions slurm;
  std::chrono::milliseconds slurm_poll{2000};
};

class Coordinator : public ExperimentService {
 public:
  Coordinator(CoordinatorOptions opts, Store* store, TelemetryHub* hub, DaemonSeams seams);
  ~Coordinator() override;

  // Brings the store up to date after a previous daemon and queues what was queued. Call before
  // Start().
  Status Recover();
  void Start();
  // Stops the running experiment (it ends `interrupted`) and the scheduler.
  void Shutdown();

  StatusOr<std::string> Submit(v1::ExperimentSpec spec, const std::string& submitter) override;
  bool AllowsCommands() const override { return opts_.allow_commands; }
  StatusOr<v1::Experiment> Get(const std::string& id) override;
  StatusOr<Page<v1::Experiment>> List(const PageRequest& page,
                                      const ExperimentFilter& filter) override;
  StatusOr<v1::Experiment> Cancel(const std::string& id) override;
  StatusOr<std::string> SubmitSweep(const v1::SweepSpec& spec,
                                    const std::string& submitter) override;
  StatusOr<v1::SweepReport> GetSweep(const std::string& id) override;
  StatusOr<Page<v1::Sweep>> ListSweeps(const PageRequest& page) override;
  StatusOr<v1::Sweep> CancelSweep(const std::string& id) override { return sweeps_.Cancel(id); }
  StatusOr<std::vector<v1::Event>> Events(const std::string& id) override;
  StatusOr<std::vector<v1::Sample>> Samples(const std::string& id) override;
  StatusOr<v1::LogsResponse> Logs(const v1::LogsRequest& req) override;
  StatusOr<v1::DeleteResponse> Delete(const std::string& id) override;
  StatusOr<v1::DeleteResponse> Prune(const v1::PruneRequest& req) override;
  StatusOr<std::unique_ptr<BlobUpload>> BeginUpload(const std::string& name,
                                                    uint64_t size) override {
    return blobs_.Begin(name, size);
  }
  pid_t fork_server_pid() const override { return fork_server_.pid(); }
  int fork_server_restarts() const override { return fork_server_.restarts(); }

  // What /metrics shows: every record's state, and the running experiment's latest sample.
  StatusOr<MetricsSnapshot> Metrics();
  // What /metrics says of the node between experiments too (a fresh NVML reading included).
  MetricsSnapshot::Node NodeMetrics();

 private:
  StatusOr<v1::DeleteResponse> DeleteRecord(const std::string& id);
  void RemoveOrphanLogs();
  // Uploaded files no record refers to (rm, prune), once their grace has passed.
  void RemoveUnusedFiles();
  // OK when every model file the spec names is stored here.
  Status CheckModelFile(const v1::ExperimentSpec& spec) const;
  // The record with its model file's name and size (from the blob store).
  v1::Experiment WithStoredFile(v1::Experiment e) const;
  void KeepSample(const std::string& id, const v1::Sample& s);
  void ThinSamples(const std::string& id, std::optional<uint32_t> node);
  void SchedulerLoop();
  void SlurmLoop();
  // The admission and placement of a sweep on Slurm (spec.slurm).
  StatusOr<std::string> SubmitSlurmSweep(const v1::SweepSpec& spec, const std::string& submitter,
                                         const SweepTracker::Admit& check);
  void FollowRecovered(const Recovered& r);
  void RunOne(v1::Experiment e);
  void EndUnstarted(v1::Experiment e, v1::ExperimentState state, const std::string& why);
  Status PrepareForkServer(const v1::Experiment& e);
  Status Admit(const v1::ExperimentSpec& spec, bool queued);
  RunnerHooks HooksFor(const std::string& id);
  RunnerEnv EnvFor();
  void Publish(const std::string& id, v1::WatchEvent ev);
  void AddEvent(const std::string& id, double t_ms, const std::string& text);

  CoordinatorOptions opts_;
  Store* store_;
  TelemetryHub* hub_;
  std::mutex latest_mu_;
  std::optional<MetricsSnapshot::Running> latest_;  // the running experiment's last sample
  DaemonSeams os_;
  BlobStore blobs_;
  ChildReaper reaper_;
  ForkServerSupervisor fork_server_;
  ExperimentQueue queue_;
  std::function<std::string(const char*)> new_id_;  // FreshIds: before sweeps_, which keeps it
  SweepTracker sweeps_;
  std::thread scheduler_;
  std::unique_ptr<SlurmSweeps> slurm_;  // null when this daemon has no Slurm (seams.slurm)
  std::thread slurm_poller_;
  std::mutex slurm_mu_;
  std::condition_variable slurm_cv_;  // wakes the poller for a shutdown or a new array
  bool slurm_stop_ = false;
  bool slurm_kick_ = false;  // a new array: look now
  bool shut_down_ = false;
};

// A new id: the prefix and 10 random hex digits.
std::string NewId(const char* prefix);
// Ids drawn by `draw` until one is on no record: 40 random bits clash with one of 20,000 records
// about once in 5,000 draws, and a new record must not take an old one's id.
using IdSource = std::function<std::string(const char* prefix)>;
IdSource FreshIds(Store* store, IdSource draw = NewId);

}  // namespace shoal
