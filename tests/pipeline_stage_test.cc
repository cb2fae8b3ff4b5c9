// A pipeline's stages (seed 004) against the unsplit model: two stages on two threads, linked in
// memory, end a step with the loss and weights one stage over every layer reaches, whatever the
// checkpoint mode; and the ring message format round-trips.
#include "worker/pipeline_stage.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "shared/pipeline.h"

namespace shoal {
namespace {

// Messages between two stages, in memory.
struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, AmoebaStates> forward, backward;
};

class MemoryLink : public StageLink {
 public:
  MemoryLink(Channel* c) : c_(c) {}
  Status SendForward(uint64_t m, const AmoebaStates& s) override { return Put(&c_->forward, m, s); }
  Status SendBackward(uint64_t m, const AmoebaStates& s) override {
    return Put(&c_->backward, m, s);
  }
  StatusOr<AmoebaStates> ReceiveForward(uint64_t m) override { return Take(&c_->forward, m); }
  StatusOr<AmoebaStates> ReceiveBackward(uint64_t m) override { return Take(&c_->backward, m); }

 private:
  Status Put(std::map<uint64_t, AmoebaStates>* q, uint64_t m, const AmoebaStates& s) {
    std::lock_guard<std::mutex> l(c_->mu);
    AmoebaStates copy;
    for (const auto& t : s) copy.push_back(t.clone());  // as the ring copies
    (*q)[m] = copy;
    c_->cv.notify_all();
    return Status::Ok();
  }
  StatusOr<AmoebaStates> Take(std::map<uint64_t, AmoebaStates>* q, uint64_t m) {
    std::unique_lock<std::mutex> l(c_->mu);
    c_->cv.wait(l, [&] { return q->count(m) > 0; });
    AmoebaStates s = (*q)[m];
    q->erase(m);
    return s;
  }
  Channel* c_;
};

constexpr uint32_t kLayers = 6, kFilters = 16, kBatch = 4, kChunks = 2, kCut = 5;

struct Trained {
  std::vector<torch::Tensor> params;  // by layer, in layer order
  double loss = 0;
};

std::vector<AmoebaLayer> Plan() {
  return PlanAmoebaNet(kLayers, kFilters, kPipelineClasses).value();
}

torch::Tensor Images() {
  torch::manual_seed(3);
  return torch::rand({kBatch, 3, kPipelineSide, kPipelineSide});
}
torch::Tensor Labels() { return torch::tensor({1, 7, 999, 0}, torch::kLong); }

void AddParams(AmoebaNetD& m, uint32_t begin, uint32_t end, Trained* out) {
  for (uint32_t i = begin; i < end; ++i)
    for (const auto& p : m.layers[i]->parameters()) out->params.push_back(p.detach().clone());
}

Trained Whole(const std::string& checkpoint) {
  const auto plan = Plan();
  AmoebaNetD model(plan, kPipelineClasses, 1, 0, plan.size());
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.1));
  PipelineStage stage(&model, &opt, {0, uint32_t(plan.size()), 1, 0, kChunks, checkpoint}, nullptr);
  auto step = stage.Step(0, Images(), Labels());
  EXPECT_TRUE(step.ok()) << step.status().message();
  Trained t;
  t.loss = step.ok() ? step->loss : 0;
  AddParams(model, 0, uint32_t(plan.size()), &t);
  return t;
}

Trained Split(const std::string& checkpoint) {
  const auto plan = Plan();
  const uint32_t n = uint32_t(plan.size());
  AmoebaNetD m0(plan, kPipelineClasses, 1, 0, kCut), m1(plan, kPipelineClasses, 1, kCut, n);
  torch::optim::SGD o0(m0.parameters(), torch::optim::SGDOptions(0.1)),
      o1(m1.parameters(), torch::optim::SGDOptions(0.1));
  Channel c;
  MemoryLink l0(&c), l1(&c);
  PipelineStage s0(&m0, &o0, {0, kCut, 2, 0, kChunks, checkpoint}, &l0);
  PipelineStage s1(&m1, &o1, {kCut, n, 2, 1, kChunks, checkpoint}, &l1);
  StatusOr<StageStep> r0 = Internal("not run");
  std::thread first([&] { r0 = s0.Step(0, Images(), torch::Tensor()); });
  auto r1 = s1.Step(0, torch::Tensor(), Labels());
  first.join();
  EXPECT_TRUE(r0.ok()) << r0.status().message();
  EXPECT_TRUE(r1.ok()) << r1.status().message();
  Trained t;
  t.loss = r1.ok() ? r1->loss : 0;
  AddParams(m0, 0, kCut, &t);
  AddParams(m1, kCut, n, &t);
  return t;
}

void ExpectSame(const Trained& a, const Trained& b) {
  EXPECT_NEAR(a.loss, b.loss, 1e-5);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i)
    EXPECT_TRUE(torch::allclose(a.params[i], b.params[i], 1e-4, 1e-5)) << "parameter " << i;
}

TEST(PipelineStageTest, TwoStagesTrainAsTheUnsplitModelDoes) {
  const Trained whole = Whole("never");
  EXPECT_NEAR(whole.loss, std::log(1000.0), 1.0);  // a fresh net: about uniform over 1000
  ExpectSame(Split("never"), whole);
}

TEST(PipelineStageTest, CheckpointingChangesNoGradient) {
  const Trained plain = Split("never");
  ExpectSame(Split("always"), plain);
  ExpectSame(Split("except_last"), plain);
  ExpectSame(Whole("always"), plain);
}

TEST(PipelineStageTest, StatesRoundTripThroughARingMessage) {
  const AmoebaStates s = {torch::rand({2, 3, 4, 5}), torch::rand({2, 7})};
  std::vector<uint8_t> buf(8 + 2 * kTensorHeaderBytes + 4 * (120 + 14));
  auto n = EncodeStates(s, buf.data(), buf.size());
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, buf.size());
  auto back = DecodeStates(buf.data(), *n);
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_TRUE(torch::equal((*back)[0], s[0]));
  EXPECT_TRUE(torch::equal((*back)[1], s[1]));
  EXPECT_FALSE(EncodeStates(s, buf.data(), buf.size() - 1).ok());  // never past the slot
  EXPECT_FALSE(DecodeStates(buf.data(), *n - 1).ok());             // a short message is refused
}

}  // namespace
}  // namespace shoal
