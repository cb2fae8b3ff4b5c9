#include "server/experiment_queue.h"

#include <algorithm>

#include "shared/os/process.h"
#include "shared/spec/sweep.h"
#include "spdlog/spdlog.h"

namespace shoal {

Status ExperimentQueue::Enqueue(const std::vector<v1::Experiment>& es, const v1::Sweep* sweep) {
  {
    // Checked and written under the lock: a shutdown must not leave a record it then runs later.
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return Unavailable("shoald is shutting down");
    RETURN_IF_ERROR(Room(es.size()));
    RETURN_IF_ERROR(store_->PutBatch(es, sweep));
    for (const auto& e : es) {
      live_[e.id()] = e;
      queue_.push_back(e.id());
    }
  }
  cv_.notify_all();
  return Status::Ok();
}

// A queue without bound would take the node's memory and the store's disk, a record at a time.
Status ExperimentQueue::Room(size_t more) const {
  if (queue_.size() + more <= max_queued_) return Status::Ok();
  return ResourceExhausted("queue: " + std::to_string(queue_.size()) +
                           " experiments are waiting and this adds " + std::to_string(more) +
                           ", over shoald's --max-queued " + std::to_string(max_queued_) +
                           ": wait for some to run, or cancel some");
}

Status ExperimentQueue::Adopt(const std::vector<v1::Experiment>& es, const v1::Sweep* sweep) {
  std::lock_guard<std::mutex> l(mu_);
  if (stopping_) return Unavailable("shoald is shutting down");
  RETURN_IF_ERROR(store_->PutBatch(es, sweep));
  for (const auto& e : es) {
    live_[e.id()] = e;
    adopted_[e.id()] = false;
  }
  return Status::Ok();
}

void ExperimentQueue::RestoreAdopted(const std::vector<v1::Experiment>& es) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& e : es) {
    live_[e.id()] = e;
    adopted_[e.id()] = e.slurm().cancel_asked();  // asked before a restart: asked still
  }
}

// An adopted experiment's cancel, once asked, stays in its record until it ends, whatever
// whoever runs it writes meanwhile. Under mu_.
v1::Experiment ExperimentQueue::WithCancelKept(const v1::Experiment& e) const {
  auto a = adopted_.find(e.id());
  if (a == adopted_.end() || !a->second || IsTerminal(e.state())) return e;
  v1::Experiment kept = e;
  kept.mutable_slurm()->set_cancel_asked(true);
  return kept;
}

void ExperimentQueue::Restore(const std::vector<v1::Experiment>& es) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& e : es) {
    live_[e.id()] = e;
    queue_.push_back(e.id());
  }
  if (queue_.size() > max_queued_)
    spdlog::warn(
        "{} experiments restored to the queue, over --max-queued {}: all are kept, and "
        "new ones are refused until it drains under",
        queue_.size(), max_queued_);
}

size_t ExperimentQueue::Waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size();
}

std::optional<v1::Experiment> ExperimentQueue::Next(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, wait, [&] { return stopping_ || !queue_.empty(); });
  if (stopping_ || queue_.empty() || !running_.empty()) return std::nullopt;
  running_ = queue_.front();
  queue_.pop_front();
  cancel_running_ = false;
  return live_[running_];
}

void ExperimentQueue::Update(const v1::Experiment& update) {
  v1::Experiment e;
  {
    std::lock_guard<std::mutex> l(mu_);
    e = WithCancelKept(update);
    if (IsTerminal(e.state())) {
      live_.erase(e.id());  // adopted_ and running_ keep it live until Done
    } else {
      live_[e.id()] = e;
    }
  }
  Save(e);
  Notify(e);
}

// A final state the store refused (locked, full disk) is kept and retried: dropped, the stored
// record said "running" for good, and nothing could cancel or delete it.
void ExperimentQueue::Save(const v1::Experiment& e) {
  const Status st = store_->Put(e);
  if (st.ok()) return;
  if (!IsTerminal(e.state())) {  // a later Update or Checkpoint stores it again
    spdlog::error("{}", st.ToString());
    return;
  }
  spdlog::error("{}; kept, and stored again until it is", st.ToString());
  std::lock_guard<std::mutex> l(mu_);
  unsaved_[e.id()] = e;
}

void ExperimentQueue::RetryUnsaved() {
  std::map<std::string, v1::Experiment> pending;
  {
    std::lock_guard<std::mutex> l(mu_);
    pending = unsaved_;
  }
  for (const auto& [id, e] : pending) {
    if (!store_->Put(e).ok()) continue;
    spdlog::info("{}: its {} record is stored now", id, v1::ExperimentState_Name(e.state()));
    std::lock_guard<std::mutex> l(mu_);
    unsaved_.erase(id);
  }
}

bool ExperimentQueue::IsUnsaved(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return unsaved_.count(id) > 0;
}

void ExperimentQueue::SetLive(const v1::Experiment& e) {
  std::lock_guard<std::mutex> l(mu_);
  if (live_.count(e.id())) live_[e.id()] = WithCancelKept(e);
}

void ExperimentQueue::Checkpoint(const v1::Experiment& e) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!live_.count(e.id())) return;  // ended meanwhile: its final record is stored
    live_[e.id()] = e;
  }
  if (Status st = store_->Put(e); !st.ok()) spdlog::error("{}", st.ToString());
}

void ExperimentQueue::Done(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  if (running_ == id) running_.clear();
  adopted_.erase(id);
}

void ExperimentQueue::Notify(const v1::Experiment& e) {
  for (const auto& fn : listeners_) fn(e);
}

StatusOr<v1::Experiment> ExperimentQueue::Cancel(const std::string& id) {
  std::unique_lock<std::mutex> l(mu_);
  auto it = live_.find(id);
  if (it == live_.end()) {
    if (auto u = unsaved_.find(id); u != unsaved_.end()) return u->second;  // ended
    l.unlock();
    return store_->Get(id);  // already ended (or unknown): cancelling is a no-op
  }
  if (running_ == id) {
    cancel_running_ = true;
    return it->second;  // the runner moves it to cancelled once every process is gone
  }
  if (auto a = adopted_.find(id); a != adopted_.end()) {
    a->second = true;  // whoever runs it ends it cancelled
    // Stored, so that a restart before the cancel reaches Slurm does not forget it; under the
    // lock, so a final record that whoever runs it stores (Update: live_ left under the lock, then
    // stored) is always written after this one, never replaced by this stale copy.
    const v1::Experiment e = it->second = WithCancelKept(it->second);
    if (Status st = store_->Put(e); !st.ok()) spdlog::error("{}", st.ToString());
    return e;
  }
  v1::Experiment e = it->second;
  queue_.erase(std::remove(queue_.begin(), queue_.end(), id), queue_.end());
  live_.erase(it);
  l.unlock();
  e.set_state(v1::CANCELLED);
  e.set_finished_unix_ms(RealtimeMs());
  Save(e);
  Notify(e);
  return e;
}

ExperimentQueue::Stop ExperimentQueue::StopRequest(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto a = adopted_.find(id); a != adopted_.end())
    return a->second ? kCancel : stopping_ ? kShutdown : kNone;
  if (running_ != id) return kNone;
  if (cancel_running_) return kCancel;
  return stopping_ ? kShutdown : kNone;
}

bool ExperimentQueue::IsLive(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return live_.count(id) > 0 || running_ == id || adopted_.count(id) > 0;
}

StatusOr<v1::Experiment> ExperimentQueue::Get(const std::string& id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = live_.find(id); it != live_.end()) return it->second;
    if (auto it = unsaved_.find(id); it != unsaved_.end()) return it->second;
  }
  return store_->Get(id);
}

StatusOr<std::vector<v1::Experiment>> ExperimentQueue::List() {
  ASSIGN_OR_RETURN(auto all, store_->List());
  Overlay(all);
  return all;
}

StatusOr<std::vector<v1::Experiment>> ExperimentQueue::ListAfter(
    const std::optional<RecordKey>& after, size_t limit) {
  ASSIGN_OR_RETURN(auto some, store_->ListAfter(after, limit));
  Overlay(some);
  return some;
}

void ExperimentQueue::Overlay(std::vector<v1::Experiment>& stored) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : stored) {
    if (auto it = live_.find(e.id()); it != live_.end()) e = it->second;
    if (auto it = unsaved_.find(e.id()); it != unsaved_.end()) e = it->second;
  }
}

void ExperimentQueue::Shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

bool ExperimentQueue::stopping() {
  std::lock_guard<std::mutex> l(mu_);
  return stopping_;
}

}  // namespace shoal
