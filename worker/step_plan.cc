#include "worker/step_plan.h"

#include <algorithm>
#include <numeric>

namespace shoal {
namespace {

bool LifetimesOverlap(const TracedBuffer& a, const TracedBuffer& b) {
  return a.alloc_at < b.free_at && b.alloc_at < a.free_at;
}

bool BytesOverlap(const PlannedSlot& a, uint64_t a_size, const PlannedSlot& b, uint64_t b_size) {
  return a.offset < b.offset + b_size && b.offset < a.offset + a_size;
}

// The lowest offset where `size` fits beside the placed buffers in `busy` (offset, size pairs).
uint64_t FirstFit(std::vector<std::pair<uint64_t, uint64_t>> busy, uint64_t size) {
  std::sort(busy.begin(), busy.end());
  uint64_t at = 0;
  for (const auto& [offset, bytes] : busy) {
    if (offset >= at + size) break;  // the gap before this one is wide enough
    at = std::max(at, offset + bytes);
  }
  return at;
}

uint64_t PeakLive(const std::vector<TracedBuffer>& trace, const std::vector<uint64_t>& rounded,
                  const std::vector<PlannedSlot>& slots) {
  std::vector<std::pair<uint32_t, int64_t>> events;  // (event, +bytes | -bytes)
  for (size_t i = 0; i < trace.size(); ++i) {
    if (!slots[i].planned) continue;
    events.emplace_back(trace[i].alloc_at, int64_t(rounded[i]));
    events.emplace_back(trace[i].free_at, -int64_t(rounded[i]));
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto& e : events) peak = std::max(peak, live += e.second);
  return uint64_t(peak);
}

}  // namespace

StepPlan PlanStep(const std::vector<TracedBuffer>& trace, uint64_t alignment) {
  StepPlan plan;
  plan.slots.resize(trace.size());
  std::vector<uint64_t> rounded(trace.size());
  for (size_t i = 0; i < trace.size(); ++i) {
    rounded[i] = (trace[i].size + alignment - 1) & ~(alignment - 1);
    plan.slots[i].size = trace[i].size;
    plan.slots[i].planned = trace[i].free_at != kOutlivesStep && trace[i].size > 0;
  }
  std::vector<uint32_t> order(trace.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return rounded[a] > rounded[b]; });
  std::vector<uint32_t> placed;
  for (uint32_t i : order) {
    if (!plan.slots[i].planned) continue;
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (uint32_t j : placed)
      if (LifetimesOverlap(trace[i], trace[j])) busy.emplace_back(plan.slots[j].offset, rounded[j]);
    plan.slots[i].offset = FirstFit(std::move(busy), rounded[i]);
    plan.arena_bytes = std::max(plan.arena_bytes, plan.slots[i].offset + rounded[i]);
    placed.push_back(i);
  }
  for (uint32_t m = 0; m < trace.size(); ++m) {
    if (!plan.slots[m].planned) continue;
    for (uint32_t k = 0; k < trace.size(); ++k)
      if (k != m && plan.slots[k].planned &&
          BytesOverlap(plan.slots[k], rounded[k], plan.slots[m], rounded[m]))
        plan.slots[m].conflicts.push_back(k);
  }
  plan.peak_live_bytes = PeakLive(trace, rounded, plan.slots);
  return plan;
}

}  // namespace shoal
