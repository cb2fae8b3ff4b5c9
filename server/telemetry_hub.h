// Fans an experiment's watch events out to any number of watchers. Publishing never waits on
// a watcher: each has a bounded queue, and a slow one loses its oldest events (counted).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

class Subscription {
 public:
  explicit Subscription(size_t capacity) : capacity_(capacity) {}
  // Waits up to `timeout` for the next event; false on timeout or when closed and drained.
  bool Next(v1::WatchEvent* out, std::chrono::milliseconds timeout);
  // The next event if there is one, without waiting.
  bool TryNext(v1::WatchEvent* out);
  // Called after every Push and at Close (a callback-driven watcher pumps from it). Once
  // SetNotify(nullptr) has returned, no call of the old function is running or will run.
  void SetNotify(std::function<void()> fn);
  bool Finished();  // closed and drained
  uint64_t dropped();

  void Push(const v1::WatchEvent& ev);
  void Close();

 private:
  void Notify();

  std::mutex mu_;
  std::condition_variable cv_;
  std::mutex notify_mu_;  // held while notify_ runs; never taken under mu_
  std::function<void()> notify_;
  std::deque<v1::WatchEvent> queue_;
  size_t capacity_;
  uint64_t dropped_ = 0;
  bool closed_ = false;
};

class TelemetryHub {
 public:
  std::shared_ptr<Subscription> Subscribe(const std::string& experiment_id, size_t capacity = 512);
  void Publish(const std::string& experiment_id, const v1::WatchEvent& ev);
  // Ends every subscription of the experiment (after its last event).
  void Close(const std::string& experiment_id);
  // Ends this one subscription only (a watcher that found its experiment already over: the
  // others may still be waiting for its last event).
  void Unsubscribe(const std::string& experiment_id, const std::shared_ptr<Subscription>& sub);
  size_t watched();  // experiments with a subscription entry

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<std::weak_ptr<Subscription>>> subs_;
};

}  // namespace shoal
