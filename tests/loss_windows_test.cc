// The first and last losses every kind reports: the same windows over each worker's losses; and
// the steps a worker keeps one by one (its first and latest, with their phases) for the trace.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "shared/ipc/layout.h"
#include "worker/scoreboard.h"
#include "worker/step_recorder.h"

namespace shoal {
namespace {

float Read(const std::atomic<uint32_t>& bits) { return BitsToFloat(bits.load()); }

std::unique_ptr<WorkerSlot> NanSlot() {
  auto slot = std::make_unique<WorkerSlot>();
  for (auto* f : {&slot->last_loss_bits, &slot->first_loss_bits, &slot->tail_loss_bits})
    f->store(FloatToBits(std::nanf("")));
  return slot;
}

// 8 steps: k = 2, so the first loss is the mean of losses 1 and 2, the tail of 7 and 8; the tail
// is unknown until the last step.
TEST(LossWindowsTest, FirstAndTailAreMeansOfTheirWindows) {
  auto slot = NanSlot();
  LossWindows w(slot.get(), 8);
  const float losses[] = {8, 6, 5, 4, 3, 2, 1.5f, 0.5f};
  for (int i = 0; i < 7; ++i) w.Add(losses[i]);
  EXPECT_FLOAT_EQ(Read(slot->first_loss_bits), 7.0f);
  EXPECT_FLOAT_EQ(Read(slot->last_loss_bits), 1.5f);
  EXPECT_TRUE(std::isnan(Read(slot->tail_loss_bits)));
  w.Add(losses[7]);
  EXPECT_FLOAT_EQ(Read(slot->tail_loss_bits), 1.0f);
}

// The window is a quarter of the steps, at most 10 and at least 1.
TEST(LossWindowsTest, TheWindowIsAQuarterOfTheStepsWithinOneToTen) {
  auto slot = NanSlot();
  LossWindows many(slot.get(), 100);  // k = 10
  for (int i = 0; i < 100; ++i) many.Add(float(i));
  EXPECT_FLOAT_EQ(Read(slot->first_loss_bits), 4.5f);
  EXPECT_FLOAT_EQ(Read(slot->tail_loss_bits), 94.5f);
  auto one = NanSlot();
  LossWindows single(one.get(), 1);  // k = 1
  single.Add(3.0f);
  EXPECT_FLOAT_EQ(Read(one->first_loss_bits), 3.0f);
  EXPECT_FLOAT_EQ(Read(one->tail_loss_bits), 3.0f);
}

// 40 steps: the first 16 and the latest 16 come back in step order with their phases, each ending
// after the one before; a reading that is not the final one carries none.
TEST(StepSpansTest, TheFirstAndLatestStepsAreKeptWithTheirPhases) {
  auto slot = NanSlot();
  StepRecorder rec(slot.get(), 40);
  EpochTotals totals;
  for (uint64_t k = 1; k <= 40; ++k) {
    StepTimes t;
    t.data_ns = 1000 * k;
    t.forward_ns = 2000;
    t.backward_ns = 3000;
    t.optimizer_ns = 4000;
    rec.Step(t, 1.0f, 8, &totals);
  }
  EXPECT_EQ(ReadSlot(*slot, 0, false).step_spans_size(), 0);
  const ipc::v1::WorkerReading r = ReadSlot(*slot, 0, true);
  ASSERT_EQ(r.step_spans_size(), 32);
  for (int i = 0; i < 32; ++i) {
    const uint64_t want = i < 16 ? uint64_t(i + 1) : uint64_t(25 + i - 16);
    EXPECT_EQ(r.step_spans(i).step(), want) << i;
    EXPECT_EQ(r.step_spans(i).data_ns(), 1000 * want);
    EXPECT_EQ(r.step_spans(i).optimizer_ns(), 4000u);
    if (i > 0) {
      EXPECT_GE(r.step_spans(i).end_ns(), r.step_spans(i - 1).end_ns());
    }
  }
  // Fewer steps than kept: each once.
  auto few = NanSlot();
  StepRecorder three(few.get(), 3);
  for (int k = 0; k < 3; ++k) three.Step(StepTimes{}, 1.0f, 8, &totals);
  EXPECT_EQ(ReadSlot(*few, 0, true).step_spans_size(), 3);
}

}  // namespace
}  // namespace shoal
