// A sweep placed on Slurm (issue 56, `shoal sweep --slurm`): each runnable point is one task of a
// job array that runs `shoald --run-point` on the node Slurm gives it, with no daemon left there.
// This daemon keeps the points' records, adopted by the queue (get, list, watch and cancel know
// them; the scheduler never runs them here), follows every array with one `scontrol show job` per
// poll, and stores each task's whole record (figures, samples, events, output) as the task ends.
// A task that ends without one fails with Slurm's state and reason and the path of its output.
// The records, the orders and the script live under one folder the nodes share (--slurm-dir).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "server/experiment_queue.h"
#include "server/slurm.h"
#include "server/store.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct SlurmSweepOptions {
  std::string shoald;    // the binary each task runs: a path every node sees
  std::string dir;       // one folder per sweep under it: orders, script, records, task output
  std::string logs_dir;  // where a stored record's captured output goes (the store's logs)
  // A running task asked to stop (its run cancelled, its record still written) is cancelled by
  // Slurm outright once it has run on this long.
  int64_t gentle_cancel_ms = 30000;
  // The daemon's uploaded files: a point's model file or tensor data set is shared with the
  // nodes under its sweep's folder (blobs/), where each task's daemon finds it.
  std::string blobs_dir;
  // This daemon's own folder (never the shared one) for each sweep's record key: what its tasks
  // hand back is sealed under it (run_record.h), and only records that check are stored.
  std::string keys_dir;
  // This daemon's folder of runs' profiler traces (a folder a run): a command run's traces that a
  // task ships back beside its record are moved there, as a local run's are.
  std::string profiles_dir;
};

class SlurmSweeps {
 public:
  // Runs a poll's changes to one sweep's points with that sweep's saves held (SweepTracker::
  // WithSavesHeld): none by default.
  using HoldSaves = std::function<void(const std::string& sweep_id, const std::function<void()>&)>;
  SlurmSweeps(Slurm* slurm, ExperimentQueue* queue, Store* store, SlurmSweepOptions opts,
              HoldSaves hold = nullptr);

  // Submits the points as job arrays, each with its orders and script under
  // dir/<sweep id>/array-K/: one array for all but points of unlike node counts (one array a
  // count) and sweeps past the cluster's MaxArraySize (cut into arrays of that many tasks; with
  // --max-parallel each array starts once the one before it has ended, so %K holds for the
  // sweep). Sets sw->slurm_job_ids (slurm_job_id: the first) and each record's `slurm` (its
  // array and task). Nothing is left submitted or written when a file cannot be written or a
  // placement is refused (naming it).
  Status Place(v1::Sweep* sw, std::vector<v1::Experiment>* exps);
  // Follows a placed sweep's arrays, whose records are now stored (or, after a restart, were).
  void Follow(const v1::Sweep& sw, const std::vector<v1::Experiment>& pending);
  // scancel of a placed sweep's arrays whose records could not be stored: nothing may run
  // unrecorded.
  void Abandon(const v1::Sweep& sw);
  // One look at every followed array: tasks that started, tasks that ended (their records stored),
  // cancels asked of points (scancel). Returns how many arrays are still followed.
  size_t Poll();

 private:
  struct Array {
    std::string sweep_id, job_id, dir;
    std::string sweep_dir;  // its sweep's folder: dir's parent (or dir, placed before arrays-K)
    // The sweep's record key; empty for an array placed before records were sealed, whose
    // records come back unsealed.
    std::string key;
    bool unsealed = false;                     // no key file: placed before records were sealed
    std::map<uint32_t, v1::Experiment> tasks;  // task index -> its point's record, until it ends
    struct Cancel {
      int64_t at_ms = 0;  // when it was asked to stop
      bool hard = false;  // cancelled by Slurm outright (pending, or running past the grace)
    };
    std::map<uint32_t, Cancel> cancels;  // the tasks whose cancel reached Slurm
    // Answers in a row a task pended for a reason Slurm never gets past (NeverStartsBecause):
    // at kNeverPolls shoald cancels it and its point fails saying so.
    std::map<uint32_t, int> never;
    // Polls in a row a task was absent from Slurm's answer: one absence is no end (scontrol
    // shortens a long list of pending tasks; a task may be between states).
    std::map<uint32_t, int> absent;
  };
  // One scancel word (an array, or a set of its tasks) and whether it reached Slurm.
  struct CancelWord {
    std::string target;
    bool gently = false;
    std::vector<uint32_t> tasks;
    Status sent;
  };
  std::vector<CancelWord> CancelsToSend(const Array& a) const;
  void RecordCancels(Array& a, const std::vector<CancelWord>& words);
  void Apply(Array& a, const std::map<uint32_t, const SlurmTask*>& by_task);
  void Forget(std::map<std::string, Array>::iterator it);  // under mu_
  // The sweep's shared files and key, once no array of it is followed; under mu_.
  void ForgetSweep(const std::string& sweep_id, const std::string& sweep_dir);
  std::string KeyPath(const std::string& sweep_id) const;
  // A fresh key for the sweep, kept in keys_dir (0600 in a 0700 folder) until its array ends.
  StatusOr<std::string> NewKey(const std::string& sweep_id);
  // Answers in a row a task must pend for a reason Slurm never gets past before it is cancelled.
  static constexpr int kNeverPolls = 3;
  static bool WillNeverStart(const Array& a, uint32_t task);
  static void CountNeverStarts(Array& a, uint32_t task, const SlurmTask& t);
  void Started(v1::Experiment& e, const SlurmTask& t);
  void Waiting(v1::Experiment& e, const SlurmTask& t);
  // The task ended (or Slurm forgot it): its record stored, or the point failed saying why.
  // False when that must wait (the record could not be read or stored now): asked again.
  bool Ended(Array& a, uint32_t task, const SlurmTask* t);
  bool KeyRead(Array& a);
  // The traces the task shipped (ProfilesPath) moved into profiles_dir/ID (`id`: its order's)
  // and listed; none otherwise. Names that leave their folder are dropped.
  void AdoptProfiles(const Array& a, uint32_t task, const std::string& id,
                     v1::Experiment* ran) const;
  std::string SweepDir(const std::string& sweep_id) const;

  Slurm* slurm_;
  ExperimentQueue* queue_;
  Store* store_;
  SlurmSweepOptions opts_;
  HoldSaves hold_;
  // arrays_: Follow may come from a submit while the poller runs; never held while Slurm's tools
  // run (Poll asks them between its looks at the arrays).
  std::mutex mu_;
  std::map<std::string, Array> arrays_;  // by job id: a sweep may be several arrays
};

// The batch script every task of a sweep's array runs: task $SLURM_ARRAY_TASK_ID's order, a
// throwaway state folder on the node, its record back under `dir`; scancel's SIGTERM is passed
// on, so the run ends cancelled and its record is still written.
// With `nodes` > 1 each task is an allocation of that many nodes: srun starts one run-point a
// node, node k of the allocation as node_rank k, all meeting at the first node's address (its
// NodeAddr) on a port from the job id; each writes its own record (NodeRecordPath).
// `blobs`: the folder of the sweep's shared uploaded files (default dir/blobs).
std::string ArrayScript(const std::string& shoald, const std::string& dir, uint32_t nodes = 1,
                        const std::string& blobs = "");

// A task's files under its sweep's folder.
std::string OrderPath(const std::string& dir, uint32_t task);
std::string RecordPath(const std::string& dir, uint32_t task);
std::string NodeRecordPath(const std::string& dir, uint32_t task, uint32_t node);
// Where task i's script marks that it stopped its run as the time limit neared (SIGUSR1).
std::string LimitPath(const std::string& dir, uint32_t task);
std::string TaskOutputPath(const std::string& dir, uint32_t task);
// Where task i's run-point ships its run's profiler traces (node-K/ below it across nodes).
std::string ProfilesPath(const std::string& dir, uint32_t task);

}  // namespace shoal
