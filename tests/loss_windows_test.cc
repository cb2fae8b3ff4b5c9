// The first and last losses every kind reports: the same windows over each worker's losses.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "shared/ipc/layout.h"
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

}  // namespace
}  // namespace shoal
