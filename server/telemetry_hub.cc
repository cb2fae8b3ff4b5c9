#include "server/telemetry_hub.h"

#include <algorithm>

namespace shoal {

bool Subscription::Next(v1::WatchEvent* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, timeout, [&] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

bool Subscription::TryNext(v1::WatchEvent* out) {
  std::lock_guard<std::mutex> l(mu_);
  if (queue_.empty()) return false;
  *out = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void Subscription::SetNotify(std::function<void()> fn) {
  std::lock_guard<std::mutex> l(notify_mu_);
  notify_ = std::move(fn);
}

void Subscription::Notify() {
  std::lock_guard<std::mutex> l(notify_mu_);
  if (notify_) notify_();
}

bool Subscription::Finished() {
  std::lock_guard<std::mutex> l(mu_);
  return closed_ && queue_.empty();
}

uint64_t Subscription::dropped() {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

void Subscription::Push(const v1::WatchEvent& ev) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) return;
    if (queue_.size() >= capacity_) {
      queue_.pop_front();
      ++dropped_;
    }
    queue_.push_back(ev);
  }
  cv_.notify_one();
  Notify();
}

void Subscription::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  Notify();
}

std::shared_ptr<Subscription> TelemetryHub::Subscribe(const std::string& id, size_t capacity) {
  auto s = std::make_shared<Subscription>(capacity);
  std::lock_guard<std::mutex> l(mu_);
  auto& v = subs_[id];
  // Watchers that went away are dropped here too, not only when the experiment publishes.
  v.erase(std::remove_if(v.begin(), v.end(), [](const auto& w) { return w.expired(); }), v.end());
  v.push_back(s);
  return s;
}

void TelemetryHub::Publish(const std::string& id, const v1::WatchEvent& ev) {
  std::vector<std::shared_ptr<Subscription>> live;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = subs_.find(id);
    if (it == subs_.end()) return;
    auto& v = it->second;
    for (size_t i = 0; i < v.size();) {
      if (auto s = v[i].lock()) {
        live.push_back(std::move(s));
        ++i;
      } else {
        v.erase(v.begin() + static_cast<long>(i));  // the watcher went away
      }
    }
  }
  for (auto& s : live) s->Push(ev);
}

void TelemetryHub::Close(const std::string& id) {
  std::vector<std::weak_ptr<Subscription>> subs;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = subs_.find(id);
    if (it == subs_.end()) return;
    subs = std::move(it->second);
    subs_.erase(it);
  }
  for (auto& w : subs) {
    if (auto s = w.lock()) s->Close();
  }
}

void TelemetryHub::Unsubscribe(const std::string& id, const std::shared_ptr<Subscription>& sub) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = subs_.find(id); it != subs_.end()) {
      auto& v = it->second;
      v.erase(std::remove_if(v.begin(), v.end(),
                             [&](const auto& w) { return w.expired() || w.lock() == sub; }),
              v.end());
      if (v.empty()) subs_.erase(it);  // no entry left behind for an ended experiment
    }
  }
  sub->Close();
}

size_t TelemetryHub::watched() {
  std::lock_guard<std::mutex> l(mu_);
  return subs_.size();
}

}  // namespace shoal
