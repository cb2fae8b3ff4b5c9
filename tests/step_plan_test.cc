// PlanStep on traces alone: no two buffers live at once share a byte, every offset is aligned,
// the arena is what the plan says, buffers that outlive the step stay out of it, and the
// conflicts a replay checks are exactly the other buffers that share bytes.
#include "worker/step_plan.h"

#include <gtest/gtest.h>

#include <random>

namespace shoal {
namespace {

uint64_t Rounded(uint64_t n) { return (n + 63) & ~uint64_t(63); }

bool Overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) { return a0 < b1 && b0 < a1; }

// Checks every invariant of a plan against its trace.
void ExpectValid(const std::vector<TracedBuffer>& t, const StepPlan& p) {
  ASSERT_EQ(p.slots.size(), t.size());
  uint64_t end = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const auto& s = p.slots[i];
    EXPECT_EQ(s.size, t[i].size);
    EXPECT_EQ(s.planned, t[i].free_at != kOutlivesStep && t[i].size > 0) << i;
    if (!s.planned) continue;
    EXPECT_EQ(s.offset % 64, 0u) << i;
    end = std::max(end, s.offset + Rounded(s.size));
    for (size_t j = 0; j < t.size(); ++j) {
      if (j == i) continue;
      if (!p.slots[j].planned) continue;
      const bool bytes = Overlap(s.offset, s.offset + Rounded(s.size), p.slots[j].offset,
                                 p.slots[j].offset + Rounded(p.slots[j].size));
      const bool lives = Overlap(t[i].alloc_at, t[i].free_at, t[j].alloc_at, t[j].free_at);
      EXPECT_FALSE(bytes && lives) << "buffers " << j << " and " << i << " live at once";
      const bool listed =
          std::find(s.conflicts.begin(), s.conflicts.end(), uint32_t(j)) != s.conflicts.end();
      EXPECT_EQ(listed, bytes) << "sharer " << j << " of " << i;
    }
  }
  EXPECT_EQ(p.arena_bytes, end);
  EXPECT_GE(p.arena_bytes, p.peak_live_bytes);
}

TEST(StepPlanTest, AFreedBufferLendsItsPlace) {
  // a, b allocated; a freed; c allocated (a's size): c takes a's place; b keeps its own.
  const std::vector<TracedBuffer> t = {{100, 0, 2}, {100, 1, 4}, {100, 3, 5}};
  StepPlan p = PlanStep(t);
  ExpectValid(t, p);
  EXPECT_EQ(p.slots[2].offset, p.slots[0].offset);
  EXPECT_EQ(p.arena_bytes, 2 * 128u);
  EXPECT_EQ(p.peak_live_bytes, 2 * 128u);
  EXPECT_EQ(p.slots[2].conflicts, std::vector<uint32_t>{0});
  EXPECT_EQ(p.slots[0].conflicts, std::vector<uint32_t>{2});
}

TEST(StepPlanTest, EqualSizesWithDifferentLifetimesPackToTheLivePeak) {
  // Greedy by size alone, ties in allocation order, puts the last one above the other two (an
  // arena of 3 buffers); two are never live at once more than in pairs, and the plan finds it.
  const std::vector<TracedBuffer> t = {{256, 0, 2}, {256, 5, 6}, {256, 3, 7}, {256, 1, 4}};
  StepPlan p = PlanStep(t);
  ExpectValid(t, p);
  EXPECT_EQ(p.peak_live_bytes, 2 * 256u);
  EXPECT_EQ(p.arena_bytes, 2 * 256u);
}

TEST(StepPlanTest, WhatOutlivesTheStepStaysOut) {
  const std::vector<TracedBuffer> t = {{4096, 0, kOutlivesStep}, {1000, 1, 2}, {0, 3, 4}};
  StepPlan p = PlanStep(t);
  ExpectValid(t, p);
  EXPECT_FALSE(p.slots[0].planned);
  EXPECT_FALSE(p.slots[2].planned);  // empty: nothing to place
  EXPECT_EQ(p.arena_bytes, Rounded(1000));
}

TEST(StepPlanTest, ARealisticStepPacksCloseToItsLivePeak) {
  // A forward that keeps every activation for the backward, which frees them in reverse, and a
  // gradient per activation freed as soon as the next one exists: the shape of a ConvNet step.
  std::vector<TracedBuffer> t;
  uint32_t ev = 0;
  const std::vector<uint64_t> acts = {147 << 20, 37 << 20, 9 << 20, 1 << 20, 1 << 16};
  std::vector<size_t> act_idx;
  for (uint64_t a : acts) {
    act_idx.push_back(t.size());
    t.push_back({a, ev++, kOutlivesStep});
  }
  size_t prev_grad = SIZE_MAX;
  for (size_t k = acts.size(); k-- > 0;) {
    const size_t g = t.size();
    t.push_back({acts[k], ev++, kOutlivesStep});
    if (prev_grad != SIZE_MAX) t[prev_grad].free_at = ev++;
    t[act_idx[k]].free_at = ev++;
    prev_grad = g;
  }
  t[prev_grad].free_at = ev++;
  StepPlan p = PlanStep(t);
  ExpectValid(t, p);
  EXPECT_LE(double(p.arena_bytes), 1.1 * double(p.peak_live_bytes));
}

TEST(StepPlanTest, RandomTracesAreAlwaysValid) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + int(rng() % 40);
    std::vector<TracedBuffer> t;
    std::vector<size_t> live;
    uint32_t ev = 0;
    for (int i = 0; i < n; ++i) {
      t.push_back({1 + rng() % (1 << 20), ev++, kOutlivesStep});
      live.push_back(t.size() - 1);
      while (!live.empty() && rng() % 3 == 0) {  // free some, in any order
        const size_t k = rng() % live.size();
        t[live[k]].free_at = ev++;
        live.erase(live.begin() + long(k));
      }
    }
    for (size_t k : live)
      if (rng() % 2 == 0) t[k].free_at = ev++;  // the rest outlive the step
    ExpectValid(t, PlanStep(t));
  }
}

}  // namespace
}  // namespace shoal
