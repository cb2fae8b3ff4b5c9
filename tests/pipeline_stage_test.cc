// A pipeline's stages (seed 004) against the unsplit model: two stages on two threads, linked in
// memory or through the kind's rings (with device slots, as between CUDA stages), end a step with
// the loss and weights one stage over every layer reaches, whatever the checkpoint mode; and the
// ring message format round-trips, its data beside its headers or apart from them.
#include "worker/kinds/pipeline/pipeline_stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "shared/ipc/batch_ring.h"
#include "shared/kinds/pipeline/pipeline.h"
#include "tests/fake_cuda_driver.h"
#include "worker/kinds/pipeline/ring_link.h"

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
  PipelineStage stage(&model, &opt, {0, uint32_t(plan.size()), 1, 0, kChunks, checkpoint, {}},
                      nullptr);
  auto step = stage.Step(0, Images(), Labels());
  EXPECT_TRUE(step.ok()) << step.status().message();
  Trained t;
  t.loss = step.ok() ? step->loss : 0;
  AddParams(model, 0, uint32_t(plan.size()), &t);
  return t;
}

// One step of two stages on two threads, over the links given.
Trained SplitOver(const std::string& checkpoint, StageLink* l0, StageLink* l1) {
  const auto plan = Plan();
  const uint32_t n = uint32_t(plan.size());
  AmoebaNetD m0(plan, kPipelineClasses, 1, 0, kCut), m1(plan, kPipelineClasses, 1, kCut, n);
  torch::optim::SGD o0(m0.parameters(), torch::optim::SGDOptions(0.1)),
      o1(m1.parameters(), torch::optim::SGDOptions(0.1));
  PipelineStage s0(&m0, &o0, {0, kCut, 2, 0, kChunks, checkpoint, {}}, l0);
  PipelineStage s1(&m1, &o1, {kCut, n, 2, 1, kChunks, checkpoint, {}}, l1);
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

Trained Split(const std::string& checkpoint) {
  Channel c;
  MemoryLink l0(&c), l1(&c);
  return SplitOver(checkpoint, &l0, &l1);
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
  auto n = EncodeStates(s, buf.data(), buf.size(), HostSlotData(buf.data()));
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, buf.size());
  auto back = DecodeStates(buf.data(), *n, HostSlotData(buf.data()));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), 2u);
  EXPECT_TRUE(torch::equal((*back)[0], s[0]));
  EXPECT_TRUE(torch::equal((*back)[1], s[1]));
  // never past the slot; a short message is refused
  EXPECT_FALSE(EncodeStates(s, buf.data(), buf.size() - 1, HostSlotData(buf.data())).ok());
  EXPECT_FALSE(DecodeStates(buf.data(), *n - 1, HostSlotData(buf.data())).ok());
}

// The two-stage pipeline of these tests, cut at kCut, and a rings segment for it in process
// memory, its rings made as the leader makes them.
struct Rings {
  PipelineLayout layout;
  std::vector<uint64_t> segment;
  explicit Rings(uint32_t chunks) {
    v1::ExperimentSpec spec;
    spec.mutable_pipeline()->set_layers(kLayers);
    spec.mutable_pipeline()->set_filters(kFilters);
    spec.mutable_pipeline()->set_stages(2);
    spec.mutable_pipeline()->set_balance(std::to_string(kCut) + "," +
                                         std::to_string(Plan().size() - kCut));
    spec.mutable_pipeline()->set_chunks(chunks);
    spec.set_batch_size(kBatch);
    layout = PlanPipeline(spec).value();
    segment.assign(layout.total_bytes / 8, 0);
    for (const auto& r : layout.rings)
      BatchRing::Create(reinterpret_cast<uint8_t*>(segment.data()) + r.offset, r.slots,
                        r.slot_bytes);
  }
  // Stage `stage`'s link, on fake device `ordinal`, posing as process `pid`.
  std::unique_ptr<RingLink> Link(uint32_t stage, CudaDriver* cuda, pid_t pid, int ordinal = 0) {
    return std::make_unique<RingLink>(StageLanes(segment.data(), layout, stage).value(),
                                      LinkDevice{cuda, torch::kCPU, ordinal, {}, pid},
                                      [] { return true; });
  }
};

// The kind's own links: a rings segment and, as between CUDA stages, each ring's data in a device
// buffer its writer exports and its reader maps (a fake driver whose device memory is host
// memory; the two stages pose as two processes). Training is the same as through memory, and
// every buffer is mapped, closed and freed in the order the kind keeps.
TEST(PipelineStageTest, RingsWithDeviceSlotsTrainAsMemoryLinksDo) {
  Rings rings(kChunks);
  FakeDriver cuda;
  {
    auto l0 = rings.Link(0, &cuda, 100), l1 = rings.Link(1, &cuda, 101);
    ASSERT_TRUE(l0->ExportDeviceSlots().ok());
    ASSERT_TRUE(l1->ExportDeviceSlots().ok());
    ASSERT_EQ(cuda.memory.size(), 2u);  // stage 0's forward ring, stage 1's backward ring
    for (const auto& [id, bytes] : cuda.memory)
      EXPECT_EQ(bytes.size(), uint64_t(kChunks) * rings.layout.rings[0].slot_bytes);

    ExpectSame(SplitOver("except_last", l0.get(), l1.get()), Split("except_last"));
    EXPECT_EQ(cuda.opened.size(), 2u);           // each reader mapped its neighbour's buffer, once
    for (const auto& [id, bytes] : cuda.memory)  // the states went through the device buffers
      EXPECT_TRUE(std::any_of(bytes.begin(), bytes.end(), [](char c) { return c != 0; }));
    l0->CloseViews();
    l1->CloseViews();
    EXPECT_EQ(cuda.closed, cuda.opened);
    EXPECT_TRUE(cuda.freed.empty());  // owners free only when their link goes
  }
  EXPECT_EQ(cuda.freed.size(), 2u);
}

// Stages on two devices: each exports its buffers as on its own device, and maps its
// neighbour's under the neighbour's device (as PyTorch opens a CUDA IPC handle), closing it there.
TEST(PipelineStageTest, StagesOnTwoDevicesMapEachOthersBuffersUnderTheOwnersDevice) {
  Rings rings(kChunks);
  FakeDriver cuda;
  auto l0 = rings.Link(0, &cuda, 100, 0), l1 = rings.Link(1, &cuda, 101, 1);
  ASSERT_TRUE(l0->ExportDeviceSlots().ok());
  ASSERT_TRUE(l1->ExportDeviceSlots().ok());
  const CudaExport* forward = RingExport(rings.segment.data(), 0);   // stage 0 writes it
  const CudaExport* backward = RingExport(rings.segment.data(), 1);  // stage 1 writes it
  EXPECT_EQ(forward->device, 0);
  EXPECT_EQ(backward->device, 1);

  ExpectSame(SplitOver("except_last", l0.get(), l1.get()), Split("except_last"));
  DevicePtr fwd = 0, bwd = 0;
  std::memcpy(&fwd, forward->handle.bytes, sizeof fwd);  // the fake's handle is the address
  std::memcpy(&bwd, backward->handle.bytes, sizeof bwd);
  EXPECT_EQ(cuda.opened_on, (std::map<DevicePtr, int>{{fwd, 0}, {bwd, 1}}));
  l0->CloseViews();
  l1->CloseViews();
  EXPECT_EQ(cuda.closed_on, cuda.opened_on);
}

TEST(PipelineStageTest, AReaderRefusesAnExportThatIsItsOwn) {
  Rings rings(1);
  FakeDriver cuda;
  auto l0 = rings.Link(0, &cuda, 7), l1 = rings.Link(1, &cuda, 7);
  ASSERT_TRUE(l0->ExportDeviceSlots().ok());
  ASSERT_TRUE(l0->SendForward(0, {torch::rand({1, 3})}).ok());
  auto got = l1->ReceiveForward(0);
  EXPECT_EQ(got.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(got.status().message(),
            "pipeline slots: a process cannot open its own CUDA IPC export");
}

TEST(PipelineStageTest, AMessageLongerThanItsSlotIsRefusedBeforeItsDataIsRead) {
  Rings rings(1);
  const PipelineRing& r = rings.layout.rings[0];  // stage 0 -> 1, forward
  auto ring =
      BatchRing::Attach(reinterpret_cast<uint8_t*>(rings.segment.data()) + r.offset, r.bytes);
  ASSERT_TRUE(ring.ok());
  ASSERT_TRUE(ring->BeginWrite(0, [] { return true; }).ok());
  ring->EndWrite(0, uint32_t(r.slot_bytes + 1));  // a writer that lies about its length
  auto got = rings.Link(1, nullptr, 1)->ReceiveForward(0);
  EXPECT_EQ(got.status().code(), Code::kDataLoss) << got.status().message();
}

// Between CUDA stages the slot carries the headers and the data lies at the same offsets in a
// device buffer; here host memory stands for it.
TEST(PipelineStageTest, StatesDataCanLieApartFromTheirHeaders) {
  const AmoebaStates s = {torch::rand({2, 3, 4, 5}), torch::rand({2, 7})};
  const size_t bytes = 8 + 2 * kTensorHeaderBytes + 4 * (120 + 14);
  std::vector<uint8_t> headers(bytes, 0xAB), device(bytes, 0);
  const auto data = DeviceSlotData(reinterpret_cast<uintptr_t>(device.data()), torch::kCPU);
  auto n = EncodeStates(s, headers.data(), bytes, data);
  ASSERT_TRUE(n.ok()) << n.status().message();
  for (size_t i = 8 + kTensorHeaderBytes; i < 8 + kTensorHeaderBytes + 120 * 4; ++i)
    ASSERT_EQ(headers[i], 0xAB) << "data written into the header slot at " << i;
  auto back = DecodeStates(headers.data(), *n, data);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(torch::equal((*back)[0], s[0]));
  EXPECT_TRUE(torch::equal((*back)[1], s[1]));
  std::fill(device.begin(), device.end(), 0);  // what was decoded is a copy
  EXPECT_TRUE(torch::equal((*back)[1], s[1]));
}

TEST(PipelineStageTest, AHeaderClaimingMoreThanItsMessageIsRefused) {
  const AmoebaStates s = {torch::rand({2, 3})};
  std::vector<uint8_t> buf(8 + kTensorHeaderBytes + 24);
  ASSERT_TRUE(EncodeStates(s, buf.data(), buf.size(), HostSlotData(buf.data())).ok());
  const int64_t huge[2] = {int64_t(1) << 40, int64_t(1) << 40};  // its product overflows
  std::memcpy(buf.data() + 8 + 8, huge, sizeof huge);
  auto back = DecodeStates(buf.data(), buf.size(), HostSlotData(buf.data()));
  EXPECT_EQ(back.status().code(), Code::kDataLoss);
}

}  // namespace
}  // namespace shoal
