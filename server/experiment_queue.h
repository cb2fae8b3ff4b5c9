// The queue and the live records: what is queued and what runs, kept in memory and in the store.
// One experiment runs at a time (the machine is the instrument). Listeners hear of every stored
// change; the queue knows nothing of sweeps (they listen).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/store.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

class ExperimentQueue {
 public:
  using Listener = std::function<void(const v1::Experiment&)>;
  enum Stop { kNone = 0, kCancel = 1, kShutdown = 2 };

  // `max_queued`: how many experiments may wait at once (shoald --max-queued); more are refused.
  explicit ExperimentQueue(Store* store, size_t max_queued = kDefaultMaxQueued)
      : store_(store), max_queued_(max_queued) {}
  static constexpr size_t kDefaultMaxQueued = 10000;
  // Called (outside the queue's lock) with every record after it is stored. Before Start.
  void Listen(Listener fn) { listeners_.push_back(std::move(fn)); }

  // Stores the records (with the sweep they are points of, when given: all or none) and queues
  // them, in order, at once. UNAVAILABLE once stopping.
  Status Enqueue(const std::vector<v1::Experiment>& es, const v1::Sweep* sweep = nullptr);
  // Stores records that run elsewhere (a sweep's points placed on Slurm, with their sweep: all
  // or none) and keeps them live, outside
  // the queue: Get, List, Cancel and StopRequest know them, Next never returns them, and they do
  // not hold up the queue. Each leaves like any record: a terminal Update, then Done.
  Status Adopt(const std::vector<v1::Experiment>& es, const v1::Sweep* sweep = nullptr);
  // Keeps live records already stored that run elsewhere (recovery: a Slurm array's points); one
  // whose cancel was asked before (slurm.cancel_asked) is asked to cancel again.
  void RestoreAdopted(const std::vector<v1::Experiment>& es);
  // Queues records already stored (recovery), in the given order: all of them, over the cap too
  // (each was accepted under the cap of its time); new ones wait until it drains under.
  void Restore(const std::vector<v1::Experiment>& es);
  size_t Waiting() const;
  // Waits up to `wait` for the next queued experiment and makes it the running one.
  std::optional<v1::Experiment> Next(std::chrono::milliseconds wait);
  // Stores a changed record and tells the listeners; a terminal one leaves the live set.
  void Update(const v1::Experiment& e);
  // The live copy only (`get` of a running experiment).
  void SetLive(const v1::Experiment& e);
  // The live copy, stored too (no listener is told): what a running record has learnt (its
  // processes, environment, steps) outlives a shoald killed mid-run.
  void Checkpoint(const v1::Experiment& e);
  // The running (or adopted) experiment ended, its last event written and its watchers closed;
  // the next may start.
  void Done(const std::string& id);
  // Stores again the final states the store refused (kept meanwhile: Get, List and Cancel see
  // them); the scheduler calls it between runs.
  void RetryUnsaved();
  bool IsUnsaved(const std::string& id);

  // A queued experiment is cancelled at once; the running one is asked to stop (it ends
  // cancelled once every process is gone); an ended or unknown one is returned as it is.
  StatusOr<v1::Experiment> Cancel(const std::string& id);
  // What the running experiment `id` should do now: nothing, cancel, or stop for shutdown.
  Stop StopRequest(const std::string& id);
  // Queued, running, or ended but not yet Done (its runner still writes its last event and
  // closes its watchers: it may not be deleted yet).
  bool IsLive(const std::string& id);

  StatusOr<v1::Experiment> Get(const std::string& id);
  StatusOr<std::vector<v1::Experiment>> List();
  // Store::ListAfter, with the live and unsaved states in place of the stored ones.
  StatusOr<std::vector<v1::Experiment>> ListAfter(const std::optional<RecordKey>& after,
                                                  size_t limit);

  void Shutdown();
  bool stopping();

 private:
  void Notify(const v1::Experiment& e);
  v1::Experiment WithCancelKept(const v1::Experiment& e) const;  // under mu_
  Status Room(size_t more) const;                                // under mu_
  void Overlay(std::vector<v1::Experiment>& stored);             // live and unsaved states in place
  void Save(const v1::Experiment& e);

  Store* store_;
  const size_t max_queued_;
  std::vector<Listener> listeners_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::map<std::string, v1::Experiment> live_;  // queued and running
  std::string running_;
  bool cancel_running_ = false;
  std::map<std::string, bool> adopted_;            // live records run elsewhere -> cancel asked
  std::map<std::string, v1::Experiment> unsaved_;  // ended, the store refused the final state
  bool stopping_ = false;
};

}  // namespace shoal
