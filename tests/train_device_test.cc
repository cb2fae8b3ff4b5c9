// The fork-safety helpers of worker/train_device.h: SeedCpu draws the same CPU stream as
// torch::manual_seed (which a forkserver must not call: it counts CUDA devices), and the rule
// that decides whether the forkserver may run a backward pass follows LibTorch's device
// registry.
#include "worker/train_device.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "tests/fake_cuda_driver.h"
#include "worker/models/models.h"
#include "worker/step_recorder.h"

namespace shoal {
namespace {

TEST(SeedCpuTest, SameStreamAsManualSeed) {
  torch::manual_seed(1234);
  const auto expected = torch::randn({64});
  torch::randn({7});  // move the generator on
  SeedCpu(1234);
  EXPECT_TRUE(torch::equal(torch::randn({64}), expected));
  SeedCpu(1235);
  EXPECT_FALSE(torch::equal(torch::randn({64}), expected));
}

TEST(SeedCpuTest, DeviceSeedOnCpuIsSeedCpu) {
  TrainDevice::Cpu()->Seed(99);
  const auto a = torch::rand({16});
  SeedCpu(99);
  EXPECT_TRUE(torch::equal(torch::rand({16}), a));
}

TEST(BackwardTouchesCudaTest, FalseWithoutCuda) {
  // Debian's LibTorch has no CUDA: a backward pass cannot touch it, so the forkserver keeps its
  // full warm-up step. (On a GPU node, LibTorch registers the CUDA guard and the answer flips;
  // the forkserver's CUDA workers ran there: docs/gpu-node.md.)
  ASSERT_FALSE(at::hasCUDA()) << "written for a LibTorch without CUDA";
  EXPECT_FALSE(BackwardTouchesCuda());
}

// A driver whose events are the host's clock when recorded, as if the device ran each phase the
// moment it was queued; it records the order of the marks.
class EventDriver : public FakeDriver {
 public:
  StatusOr<CudaEvent> CreateEvent() override {
    times.emplace_back();
    return CudaEvent(reinterpret_cast<void*>(times.size()));  // 1-based: never null
  }
  Status RecordEvent(CudaEvent e) override {
    if (fail == "record") return Internal("cuEventRecord: CUDA error 700: an illegal address");
    const size_t i = reinterpret_cast<size_t>(e) - 1;
    times[i] = std::chrono::steady_clock::now();
    marks.push_back(int(i));
    return Status::Ok();
  }
  StatusOr<float> ElapsedMs(CudaEvent a, CudaEvent b) override {
    const auto& ta = times[reinterpret_cast<size_t>(a) - 1];
    const auto& tb = times[reinterpret_cast<size_t>(b) - 1];
    return std::chrono::duration<float, std::milli>(tb - ta).count();
  }
  Status DestroyEvent(CudaEvent) override {
    ++destroyed;
    return Status::Ok();
  }
  std::vector<std::chrono::steady_clock::time_point> times;
  std::vector<int> marks;
  int destroyed = 0;
};

// A model whose forward takes a known while: the forward phase, timed from the events, holds it.
struct SlowForward : Model {
  SlowForward() { w = register_parameter("w", torch::ones({4, 2})); }
  torch::Tensor forward(torch::Tensor x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return torch::log_softmax(x.mm(w), 1);
  }
  torch::Tensor w;
};

TEST(PhaseEventsTest, TrainStepTimesEachPhaseFromTheEventsNotTheHostsWaits) {
  EventDriver driver;
  auto events = PhaseEvents::Make(&driver);
  ASSERT_TRUE(events.ok()) << events.status().message();
  SlowForward model;
  torch::optim::SGD opt(model.parameters(), 0.1);
  float loss = 0;
  bool synced = false;
  const StepTimes t = TrainStep(
      model, opt, torch::randn({8, 4}), torch::zeros({8}, torch::kLong), &loss,
      [&] { synced = true; }, nullptr, events->get());
  EXPECT_FALSE(synced);  // events replace the waits
  EXPECT_EQ(driver.marks, (std::vector<int>{PhaseEvents::kForward, PhaseEvents::kBackward,
                                            PhaseEvents::kUpdate, PhaseEvents::kEnd}));
  EXPECT_GE(t.forward_ns, 29000000u);
  EXPECT_LT(t.backward_ns, t.forward_ns);
  EXPECT_TRUE(std::isfinite(loss));
  events->reset();
  EXPECT_EQ(driver.destroyed, int(PhaseEvents::kCount));
}

TEST(PhaseEventsTest, ADriverErrorFailsTheStepWithItsMessage) {
  EventDriver driver;
  auto events = PhaseEvents::Make(&driver);
  ASSERT_TRUE(events.ok());
  driver.fail = "record";
  try {
    (*events)->Record(PhaseEvents::kData);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "cuEventRecord: CUDA error 700: an illegal address");
  }
  FakeDriver no_events;  // a driver without events: said when the worker sets up, not mid-run
  EXPECT_EQ(PhaseEvents::Make(&no_events).status().message(), "no CUDA events");
}

}  // namespace
}  // namespace shoal
