#include "worker/step_plan.h"

#include <algorithm>
#include <cstdint>
#include <random>

namespace shoal {
namespace {

bool LifetimesOverlap(const TracedBuffer& a, const TracedBuffer& b) {
  return a.alloc_at < b.free_at && b.alloc_at < a.free_at;
}

bool BytesOverlap(const PlannedSlot& a, uint64_t a_size, const PlannedSlot& b, uint64_t b_size) {
  return a.offset < b.offset + b_size && b.offset < a.offset + a_size;
}

// Where `size` goes beside the placed buffers in `busy` (offset, size pairs): the lowest gap it
// fits (first fit) or the narrowest (best fit), else above them all.
uint64_t Fit(std::vector<std::pair<uint64_t, uint64_t>> busy, uint64_t size, bool best_fit) {
  std::sort(busy.begin(), busy.end());
  uint64_t at = 0, best = UINT64_MAX, best_gap = UINT64_MAX;
  for (const auto& [offset, bytes] : busy) {
    if (offset >= at + size) {  // the gap [at, offset) is wide enough
      if (!best_fit) return at;
      if (offset - at < best_gap) best = at, best_gap = offset - at;
    }
    at = std::max(at, offset + bytes);
  }
  return best != UINT64_MAX ? best : at;
}

// The offsets of one packing: the planned buffers placed in `order`, each beside the buffers
// already placed whose lifetimes overlap its own.
std::vector<uint64_t> Pack(const std::vector<TracedBuffer>& trace,
                           const std::vector<uint64_t>& rounded, const std::vector<uint32_t>& order,
                           bool best_fit, uint64_t* arena) {
  std::vector<uint64_t> offsets(trace.size(), 0);
  std::vector<uint32_t> placed;
  *arena = 0;
  for (uint32_t i : order) {
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (uint32_t j : placed)
      if (LifetimesOverlap(trace[i], trace[j])) busy.emplace_back(offsets[j], rounded[j]);
    offsets[i] = Fit(std::move(busy), rounded[i], best_fit);
    *arena = std::max(*arena, offsets[i] + rounded[i]);
    placed.push_back(i);
  }
  return offsets;
}

// Orders to pack in. No one order packs every step best: greedy by size (inference compilers'
// choice) leaves gaps when equal sizes have different lifetimes, as a ConvNet's do, so a plan
// tries these, and the same by size with sizes jittered (seeded: a plan is reproducible).
std::vector<std::vector<uint32_t>> CandidateOrders(const std::vector<TracedBuffer>& trace,
                                                   const std::vector<uint64_t>& rounded,
                                                   const std::vector<uint32_t>& planned) {
  auto life = [&](uint32_t i) { return uint64_t(trace[i].free_at - trace[i].alloc_at); };
  auto sorted = [&](auto less) {
    std::vector<uint32_t> o = planned;
    std::stable_sort(o.begin(), o.end(), less);
    return o;
  };
  std::vector<std::vector<uint32_t>> orders = {
      sorted([&](uint32_t a, uint32_t b) { return rounded[a] > rounded[b]; }),
      sorted([&](uint32_t a, uint32_t b) {
        return rounded[a] != rounded[b] ? rounded[a] > rounded[b] : life(a) > life(b);
      }),
      sorted([&](uint32_t a, uint32_t b) {
        return life(a) != life(b) ? life(a) > life(b) : rounded[a] > rounded[b];
      }),
      sorted([&](uint32_t a, uint32_t b) {
        return double(rounded[a]) * double(life(a)) > double(rounded[b]) * double(life(b));
      }),
      planned,  // as allocated
  };
  // Each packing is quadratic in the buffers: the jittered ones stop at a budget of pairs (a
  // ConvNet's step has tens of traced buffers: all 32; a thousand: none), so a plan stays
  // milliseconds whatever the model.
  constexpr uint64_t kPairBudget = uint64_t(8) << 20;
  const uint64_t pairs = std::max<uint64_t>(1, uint64_t(planned.size()) * planned.size());
  const auto rounds = int(std::min<uint64_t>(32, kPairBudget / pairs));
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> key(trace.size());
    for (uint32_t i : planned) key[i] = double(rounded[i]) * jitter(rng);
    orders.push_back(sorted([&](uint32_t a, uint32_t b) { return key[a] > key[b]; }));
  }
  return orders;
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
  std::vector<uint32_t> planned;
  for (uint32_t i = 0; i < trace.size(); ++i)
    if (plan.slots[i].planned) planned.push_back(i);
  plan.peak_live_bytes = PeakLive(trace, rounded, plan.slots);
  // The tightest packing of every order and fit; the live peak is a floor none goes below.
  std::vector<uint64_t> best;
  plan.arena_bytes = UINT64_MAX;
  for (const auto& order : CandidateOrders(trace, rounded, planned)) {
    for (const bool best_fit : {false, true}) {
      uint64_t arena = 0;
      std::vector<uint64_t> offsets = Pack(trace, rounded, order, best_fit, &arena);
      if (arena < plan.arena_bytes) plan.arena_bytes = arena, best = std::move(offsets);
    }
    if (plan.arena_bytes == plan.peak_live_bytes) break;
  }
  for (uint32_t i : planned) plan.slots[i].offset = best[i];
  for (uint32_t m = 0; m < trace.size(); ++m) {
    if (!plan.slots[m].planned) continue;
    for (uint32_t k = 0; k < trace.size(); ++k)
      if (k != m && plan.slots[k].planned &&
          BytesOverlap(plan.slots[k], rounded[k], plan.slots[m], rounded[m]))
        plan.slots[m].conflicts.push_back(k);
  }
  return plan;
}

}  // namespace shoal
