// The weight segment binding: parameters of a model bound to the segment alias it, so a write by
// one process is seen by another; a private copy does not.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "shared/os/shm.h"
#include "worker/batches.h"
#include "worker/segment_weights.h"

namespace shoal {
namespace {

struct PlannedSegment {
  ShmSegment seg;
  WeightsPlan plan;
};

PlannedSegment MakeSegment(torch::nn::Module& model, const std::string& id) {
  auto tensors = ModelTensors(model);
  EXPECT_TRUE(tensors.ok());
  auto plan = PlanWeights(*tensors);
  EXPECT_TRUE(plan.ok());
  auto seg = ShmSegment::Create(SegmentName(id, "weights"), plan->total_bytes);
  EXPECT_TRUE(seg.ok()) << seg.status().message();
  WriteWeightsTable(*plan, seg->data());
  CopyWeightsToSegment(model, *plan, seg->data());
  return {std::move(seg).value(), *plan};
}

// Runs `fn` in a forked child and returns its exit code.
template <typename F>
int InChild(F fn) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn());
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::set_num_threads(1);  // we fork: no intra-op pool in this process
    id_ = "wt" + std::to_string(getpid());
  }
  void TearDown() override { RemoveSegments(SegmentPrefix(id_)); }
  std::string id_;
};

TEST_F(WeightsTest, LayoutMatchesTheModel) {
  MnistConvNet model;
  auto t = ModelTensors(model).value();
  ASSERT_EQ(t.size(), 8u);
  EXPECT_EQ(t[0].name, "conv1.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{1000, 1, 5, 5}));
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{20, 1000, 5, 5}));
  EXPECT_EQ(t[4].shape, (std::vector<int64_t>{50, 320}));
  EXPECT_EQ(t[7].shape, (std::vector<int64_t>{10}));
}

TEST_F(WeightsTest, BoundParametersAliasTheSegmentAcrossProcesses) {
  MnistConvNet model;
  auto s = MakeSegment(model, id_);
  const uint64_t before = SegmentChecksum(s.plan, s.seg.data());
  ASSERT_TRUE(BindWeightsToSegment(model, s.plan, s.seg.data()).ok());
  EXPECT_EQ(ParamsChecksum(model), before);
  EXPECT_EQ(static_cast<char*>(model.parameters()[0].data_ptr()),
            static_cast<char*>(s.seg.data()) + s.plan.tensors[0].offset);

  // A child that attaches by name (as a spawned worker does) writes; the parent sees it.
  ASSERT_EQ(InChild([&] {
              auto seg = ShmSegment::Open(SegmentName(id_, "weights"), true);
              if (!seg.ok()) return 1;
              MnistConvNet other;
              auto plan = ReadWeights(seg->data(), seg->size());
              if (!plan.ok() || !BindWeightsToSegment(other, *plan, seg->data()).ok()) return 2;
              torch::NoGradGuard ng;
              other.fc2->bias.add_(1.0f);
              other.conv1->weight.mul_(2.0f);
              return 0;
            }),
            0);
  EXPECT_NE(SegmentChecksum(s.plan, s.seg.data()), before);
  EXPECT_EQ(ParamsChecksum(model), SegmentChecksum(s.plan, s.seg.data()));

  // And a forked child that inherited the bound model writes through it too.
  const float b3 = model.fc2->bias[3].item<float>();
  ASSERT_EQ(InChild([&] {
              torch::NoGradGuard ng;
              model.fc2->bias.sub_(0.5f);
              return 0;
            }),
            0);
  EXPECT_FLOAT_EQ(model.fc2->bias[3].item<float>(), b3 - 0.5f);
}

TEST_F(WeightsTest, PrivateCopyDoesNotTouchTheSegment) {
  MnistConvNet model;
  auto s = MakeSegment(model, id_);
  const uint64_t before = SegmentChecksum(s.plan, s.seg.data());
  MnistConvNet copy;
  CopyWeightsFromSegment(copy, s.plan, s.seg.data());
  EXPECT_EQ(ParamsChecksum(copy), before);
  EXPECT_NE(copy.parameters()[0].data_ptr(),
            static_cast<char*>(s.seg.data()) + s.plan.tensors[0].offset);
  {
    torch::NoGradGuard ng;
    copy.fc2->bias.add_(1.0f);
  }
  EXPECT_NE(ParamsChecksum(copy), before);
  EXPECT_EQ(SegmentChecksum(s.plan, s.seg.data()), before);
}

TEST_F(WeightsTest, MismatchedSegmentIsRefused) {
  MnistConvNet model;
  auto plan = PlanWeights({{"conv1.weight", {1000, 1, 5, 5}}});
  ASSERT_TRUE(plan.ok());
  std::vector<char> buf(plan->total_bytes);
  Status st = BindWeightsToSegment(model, *plan, buf.data());
  EXPECT_EQ(st.code(), Code::kDataLoss);
  // The right names and shapes in another dtype are not this model's either.
  auto tensors = ModelTensors(model).value();
  tensors[3].dtype = WeightDtype::kBFloat16;
  auto other = PlanWeights(tensors);
  ASSERT_TRUE(other.ok());
  std::vector<char> buf2(other->total_bytes);
  EXPECT_EQ(BindWeightsToSegment(model, *other, buf2.data()).code(), Code::kDataLoss);
  EXPECT_EQ(CheckWeightsMatch(model, *other).code(), Code::kDataLoss);
}

TEST_F(WeightsTest, SyntheticDataIsLearnable) {
  DataHeader h = PlanData(600, 100, 28, 28);
  std::vector<uint8_t> buf(h.total_bytes);
  FillSynthetic(600, 100, 3, h, buf.data());
  // Labels span all classes and images differ by class.
  std::vector<int> seen(10);
  for (uint64_t i = 0; i < 600; ++i) seen[buf[h.train_labels + i]]++;
  for (int c = 0; c < 10; ++c) EXPECT_GT(seen[c], 20) << c;
  int64_t idx[2] = {0, 1};
  torch::Tensor x, y;
  MakeBatch(buf.data() + h.train_images, buf.data() + h.train_labels, idx, 2, 784, &x, &y);
  EXPECT_EQ(x.sizes().vec(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{2}));
}

// The device path's logic, run on the CPU (no GPU here): the device batch is MakeBatch's batch,
// and binding to a "device" buffer aliases it exactly as binding to the segment does.
TEST_F(WeightsTest, DeviceBatchesAndBindingMatchTheHostPath) {
  DataHeader h = PlanData(50, 10, 28, 28);
  std::vector<uint8_t> buf(h.total_bytes);
  FillSynthetic(50, 10, 3, h, buf.data());
  const DataView view{&h, buf.data()};
  const DeviceData on = UploadTrainSet(view, torch::kCPU);
  EXPECT_EQ(on.images.sizes().vec(), (std::vector<int64_t>{50, 784}));
  EXPECT_EQ(on.labels.scalar_type(), torch::kLong);
  const int64_t idx[3] = {7, 0, 42};
  torch::Tensor x, y, dx, dy;
  MakeBatch(view.train_images(), view.train_labels(), idx, 3, 784, &x, &y);
  MakeDeviceBatch(on, idx, 3, &dx, &dy);
  EXPECT_TRUE(torch::equal(x, dx));
  EXPECT_TRUE(torch::equal(y, dy));

  MnistConvNet model;
  PlannedSegment s = MakeSegment(model, id_);
  MnistConvNet bound;
  auto base = reinterpret_cast<DevicePtr>(s.seg.data());
  ASSERT_TRUE(BindWeightsToDevice(bound, s.plan, base, torch::kCPU).ok());
  EXPECT_EQ(ParamsChecksum(bound), SegmentChecksum(s.plan, s.seg.data()));
  bound.parameters()[7].data().fill_(0.25f);  // an update lands in the buffer
  EXPECT_EQ(
      reinterpret_cast<float*>(static_cast<char*>(s.seg.data()) + s.plan.tensors[7].offset)[0],
      0.25f);
}

// A model with BatchNorm, a bfloat16 layer and a rank-5 (Conv3d) weight: its buffers follow its
// parameters in the segment, each in its own dtype, and bound ones are shared across processes as
// PyTorch's share_memory() shares them: a forward in training mode in a child moves the running
// statistics and the batch counter the parent reads.
struct Mixed : torch::nn::Module {
  Mixed() {
    conv = register_module("conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(2, 3, 1)));
    bn = register_module("bn", torch::nn::BatchNorm3d(3));
    head = register_module("head", torch::nn::Linear(3, 2));
    head->to(torch::kBFloat16);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = bn(conv(x)).mean({2, 3, 4});
    return head(h.to(torch::kBFloat16));
  }
  torch::nn::Conv3d conv{nullptr};
  torch::nn::BatchNorm3d bn{nullptr};
  torch::nn::Linear head{nullptr};
};

TEST_F(WeightsTest, BuffersAndEveryDtypeAndRankAreSharedAcrossProcesses) {
  Mixed model;
  auto t = ModelTensors(model).value();
  ASSERT_EQ(t.size(), 9u);  // 6 parameters, then running_mean, running_var, num_batches_tracked
  EXPECT_EQ(t[0].shape.size(), 5u);
  EXPECT_EQ(t[4].dtype, WeightDtype::kBFloat16);
  EXPECT_EQ(t[6].role, WeightRole::kBuffer);
  EXPECT_EQ(t[8].dtype, WeightDtype::kInt64);
  auto s = MakeSegment(model, id_);
  ASSERT_TRUE(BindWeightsToSegment(model, s.plan, s.seg.data()).ok());
  const torch::Tensor mean0 = model.bn->running_mean.clone();
  ASSERT_EQ(InChild([&] {
              auto seg = ShmSegment::Open(SegmentName(id_, "weights"), true);
              if (!seg.ok()) return 1;
              Mixed other;
              auto plan = ReadWeights(seg->data(), seg->size());
              if (!plan.ok() || !BindWeightsToSegment(other, *plan, seg->data()).ok()) return 2;
              other.train();
              torch::NoGradGuard ng;
              other.forward(torch::randn({4, 2, 2, 3, 3}) + 5);
              other.head->weight.fill_(0.5);
              return 0;
            }),
            0);
  EXPECT_EQ(model.bn->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_FALSE(model.bn->running_mean.allclose(mean0));
  EXPECT_EQ(model.head->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(model.head->weight[0][0].item<float>(), 0.5f);
  // The checksum covers the parameters, whatever their dtypes, and not the buffers.
  EXPECT_EQ(ParamsChecksum(model), SegmentChecksum(s.plan, s.seg.data()));
  // A private copy takes the buffers too.
  Mixed copy;
  CopyWeightsFromSegment(copy, s.plan, s.seg.data());
  EXPECT_EQ(copy.bn->num_batches_tracked.item<int64_t>(), 1);
  EXPECT_TRUE(copy.bn->running_mean.equal(model.bn->running_mean));
}

// memory_format channels_last: a conv's weight in NHWC order is recorded so in the segment, its
// bytes are laid out in that order, a bound view keeps the order (and the values), a private copy
// of the segment in a model of the same order has the same values, and a model in the other
// order is refused as not the segment's.
struct TwoConvs : torch::nn::Module {
  TwoConvs() {
    a = register_module("a", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 4, 3)));
    b = register_module("b", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 2, 1)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return b(a(x)); }
  void ChannelsLast() {
    torch::NoGradGuard ng;
    for (auto p : parameters())
      if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  }
  torch::nn::Conv2d a{nullptr}, b{nullptr};
};

TEST_F(WeightsTest, ChannelsLastWeightsKeepTheirOrderInTheSegment) {
  TwoConvs model;
  model.ChannelsLast();
  const torch::Tensor w0 = model.a->weight.detach().clone();
  auto t = ModelTensors(model).value();
  EXPECT_TRUE(t[0].channels_last);   // a.weight [4,3,3,3]
  EXPECT_FALSE(t[1].channels_last);  // a.bias
  EXPECT_FALSE(t[2].channels_last);  // b.weight [2,4,1,1]: dense in both orders, kept NCHW
  auto s = MakeSegment(model, id_);
  auto read = ReadWeights(s.seg.data(), s.seg.size());
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_TRUE(read->tensors[0].t.channels_last);
  // The segment's bytes are NHWC: element [o=0, c=1, h=0, w=0] is the second float.
  const float* bytes =
      reinterpret_cast<const float*>(static_cast<char*>(s.seg.data()) + s.plan.tensors[0].offset);
  EXPECT_EQ(bytes[1], w0[0][1][0][0].item<float>());
  ASSERT_TRUE(BindWeightsToSegment(model, *read, s.seg.data()).ok());
  EXPECT_TRUE(model.a->weight.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(model.a->weight.equal(w0));
  EXPECT_EQ(ParamsChecksum(model), SegmentChecksum(s.plan, s.seg.data()));
  TwoConvs copy;
  copy.ChannelsLast();
  CopyWeightsFromSegment(copy, *read, s.seg.data());
  EXPECT_TRUE(copy.a->weight.equal(w0));
  TwoConvs nchw;
  EXPECT_EQ(CheckWeightsMatch(nchw, *read).code(), Code::kDataLoss);
}

}  // namespace
}  // namespace shoal
