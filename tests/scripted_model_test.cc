// A user's TorchScript model as Shoal trains it: its first-step gradients are PyTorch's for the
// same weights and batch (the eager module, computed by Debian's PyTorch when the tests run), its
// weights bind to the shared segment, what cannot train is refused, and a tensor set's batches
// put B where the input spec says.
#include "worker/models/scripted_model.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "shared/ipc/layout.h"
#include "shared/os/shm.h"
#include "shared/spec/admission.h"
#include "tests/testutil.h"
#include "worker/kinds/data_parallel/data_parallel.h"
#include "worker/kinds/hogwild/hogwild.h"
#include "worker/model_file.h"
#include "worker/segment_weights.h"
#include "worker/tensor_file.h"
#include "worker/tensor_set.h"

namespace shoal {
namespace {

using nlohmann::json;

// The models of tests/models/make_models.py, made once for the suite.
class ScriptedModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    dir_ = new std::string(testing::MadeModels({{"make_models.py"}}, &error));
    ASSERT_FALSE(dir_->empty()) << error;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Path(const std::string& name) { return *dir_ + "/" + name + ".pt"; }
  static std::string* dir_;
};
std::string* ScriptedModelTest::dir_ = nullptr;

torch::Tensor FromJson(const json& t) {
  std::vector<int64_t> shape = t["shape"].get<std::vector<int64_t>>();
  if (t["dtype"] == "torch.int64")
    return torch::tensor(t["data"].get<std::vector<int64_t>>(), torch::kLong).reshape(shape);
  return torch::tensor(t["data"].get<std::vector<float>>(), torch::kFloat).reshape(shape);
}

// forward and backward of the batch PyTorch used; the largest difference from its gradients.
// `use` sets a measured option on the loaded model; the loss must be PyTorch's within `loss_tol`.
double MaxGradDiff(const std::string& name, const std::string& loss, const std::string& path,
                   const std::string& grads_path,
                   const std::function<void(ScriptedModel&)>& use = nullptr,
                   double loss_tol = 1e-5) {
  json ref = json::parse(std::ifstream(grads_path));
  auto model = ScriptedModel::Load(path, loss);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (use) use(**model);
  std::vector<torch::Tensor> inputs;
  for (const auto& t : ref["inputs"]) inputs.push_back(FromJson(t));
  torch::Tensor target = torch::tensor(ref["target"].get<std::vector<int64_t>>(), torch::kLong)
                             .reshape(ref["target_shape"].get<std::vector<int64_t>>());
  (*model)->train();
  torch::Tensor l = (*model)->Loss(inputs, target);
  EXPECT_NEAR(l.item<double>(), ref["loss"].get<double>(), loss_tol) << name;
  EXPECT_EQ(l.scalar_type(), torch::kFloat) << name;
  l.backward();
  double worst = 0;
  auto params = (*model)->parameters();
  const auto& names = (*model)->parameter_names();
  EXPECT_EQ(params.size(), ref["grads"].size()) << name;
  for (size_t i = 0; i < params.size(); ++i) {
    const json& g = ref["grads"][names[i]];
    EXPECT_FALSE(g.is_null()) << name << ": PyTorch has no gradient named " << names[i];
    if (g.is_null()) continue;
    torch::Tensor want = torch::tensor(g.get<std::vector<float>>(), torch::kFloat);
    worst = std::max(worst, (params[i].grad().flatten() - want).abs().max().item<double>());
  }
  return worst;
}

TEST_F(ScriptedModelTest, FirstStepGradientsArePyTorchs) {
  for (const auto& [name, loss] :
       std::vector<std::pair<std::string, std::string>>{{"mlp", "cross_entropy"},
                                                        {"cnn_exact", "cross_entropy"},
                                                        {"encoder_exact", "cross_entropy"},
                                                        {"own_loss", "output"},
                                                        {"tied", "cross_entropy"},
                                                        {"gpt_tiny", "cross_entropy"},
                                                        // a NamedTuple: its first element
                                                        {"tuple_out", "cross_entropy"}}) {
    const double diff = MaxGradDiff(name, loss, Path(name), *dir_ + "/" + name + ".grads.json");
    std::printf("%s: max |gradient - PyTorch's| = %.3g\n", name.c_str(), diff);
    EXPECT_LE(diff, 1e-5) << name;
  }
}

// memory_format channels_last is the same math in NHWC order: the first step's gradients are
// PyTorch's (NCHW) within the same bound, the parameters and their gradients in NHWC order.
TEST_F(ScriptedModelTest, InChannelsLastOrderTheGradientsArePyTorchs) {
  torch::Tensor weight, grad;
  const double diff = MaxGradDiff("cnn_exact", "cross_entropy", Path("cnn_exact"),
                                  *dir_ + "/cnn_exact.grads.json", [&](ScriptedModel& m) {
                                    m.UseChannelsLast();
                                    weight = m.parameters()[0];
                                  });
  EXPECT_LE(diff, 1e-5);
  ASSERT_EQ(weight.dim(), 4);
  EXPECT_TRUE(IsChannelsLast(weight));
  EXPECT_TRUE(IsChannelsLast(weight.grad()));
}

// autocast bfloat16: forward's matrix products and convolutions in bfloat16 (LibTorch emulates
// them on a CPU without the instructions, slowly but exactly as it would run them), the loss and
// the gradients in float32, near PyTorch's float32 step and not equal to it.
TEST_F(ScriptedModelTest, UnderBfloatAutocastTheStepIsNearPyTorchsFloatOne) {
  const double diff = MaxGradDiff(
      "cnn_exact", "cross_entropy", Path("cnn_exact"), *dir_ + "/cnn_exact.grads.json",
      [](ScriptedModel& m) { m.UseAutocast(torch::kBFloat16); }, 5e-2);
  std::printf("cnn_exact under bfloat16 autocast: max |gradient - PyTorch's float32| = %.3g\n",
              diff);
  EXPECT_GT(diff, 1e-6);  // bfloat16's 8-bit mantissa shows
  EXPECT_LE(diff, 5e-2);
  auto model = ScriptedModel::Load(Path("cnn_exact"), "cross_entropy").value();
  model->UseAutocast(torch::kBFloat16);
  EXPECT_EQ(model->forward(torch::randn({2, 3, 16, 16})).scalar_type(), torch::kFloat);
  EXPECT_FALSE(at::autocast::is_cpu_enabled());  // left as it was, after the forward
}

TEST_F(ScriptedModelTest, WeightsBoundToTheSegmentAreTheModules) {
  auto a = ScriptedModel::Load(Path("mlp"), "cross_entropy").value();
  auto b = ScriptedModel::Load(Path("mlp"), "cross_entropy").value();
  auto plan = PlanWeights(ModelTensors(*a).value());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(plan->tensors[0].t.name, std::string("fc1/weight"));
  const std::string name = "shoal.scripted-test." + std::to_string(::getpid());
  auto seg = ShmSegment::Create(name, plan->total_bytes);
  ASSERT_TRUE(seg.ok());
  CopyWeightsToSegment(*a, *plan, seg->data());
  ASSERT_TRUE(BindWeightsToSegment(*a, *plan, seg->data()).ok());
  ASSERT_TRUE(BindWeightsToSegment(*b, *plan, seg->data()).ok());
  torch::Tensor x = torch::randn({4, 64});
  torch::Tensor y = torch::tensor({1, 2, 3, 4}, torch::kLong);
  const torch::Tensor before = b->forward(x).clone();
  torch::optim::SGD opt(a->parameters(), torch::optim::SGDOptions(0.5));
  a->Loss({x}, y).backward();
  opt.step();                                          // a step through one module...
  EXPECT_TRUE(b->forward(x).allclose(a->forward(x)));  // ...is the other's: the scripted forward
  EXPECT_FALSE(b->forward(x).allclose(before));        // computes with the segment's memory
  EXPECT_EQ(b->parameters()[0].data_ptr(),
            static_cast<void*>(static_cast<char*>(seg->data()) + plan->tensors[0].offset));
  ShmSegment::Remove(name);
}

// A CUDA run's leader probes with forward passes only: LibTorch's first backward would initialise
// CUDA in it (a forked worker could not use CUDA then). The target is still found, the step's
// memory is left unmeasured (absent, not 0 MiB), and no gradient is left behind.
TEST_F(ScriptedModelTest, ACudaRunsProbeFindsTheTargetWithoutABackwardPass) {
  auto model = ScriptedModel::Load(Path("mlp"), "cross_entropy").value();
  v1::ExperimentSpec spec;
  spec.set_input("float32[B,64]");
  spec.set_loss("cross_entropy");
  spec.set_classes(10);
  spec.set_batch_size(8);
  spec.set_device("cuda");
  int backward_passes = 0;
  model->parameters()[0].register_hook([&](torch::Tensor g) {
    ++backward_passes;
    return g;
  });
  auto probe = ProbeModelFile(*model, spec, nullptr);
  ASSERT_TRUE(probe.ok()) << probe.status().message();
  EXPECT_EQ(probe->step_bytes, 0u);
  EXPECT_EQ(probe->target.classes, 10);
  EXPECT_GT(probe->param_bytes, 0u);
  EXPECT_EQ(backward_passes, 0);
  spec.set_device("cpu");  // the CPU's probe runs its step, backward included
  ASSERT_TRUE(ProbeModelFile(*model, spec, nullptr).ok());
  EXPECT_GT(backward_passes, 0);
}

TEST_F(ScriptedModelTest, RefusesWhatCannotTrain) {
  auto frozen = ScriptedModel::Load(Path("frozen"), "cross_entropy");
  ASSERT_TRUE(frozen.ok());
  EXPECT_NE((*frozen)->Untrainable().find("no trainable parameter"), std::string::npos);
  EXPECT_EQ(ScriptedModel::Load(Path("mlp"), "cross_entropy").value()->Untrainable(), "");
  testing::TempDir own;  // the made models are shared with other tests: write nothing there
  std::ofstream(own / "garbage.pt") << "PK\x03\x04 certainly not a zip archive";
  auto garbage = ScriptedModel::Load(own / "garbage.pt", "cross_entropy");
  EXPECT_EQ(garbage.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(garbage.status().message().find("not a TorchScript archive"), std::string::npos);
  auto mlp = ScriptedModel::Load(Path("mlp"), "cross_entropy").value();
  auto wrong = mlp->TryForward({torch::randn({2, 3, 32, 32})});
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("forward refused the inputs"), std::string::npos);
  EXPECT_EQ(wrong.status().message().find('\n'), std::string::npos);  // escaped, one line
  EXPECT_LE(wrong.status().message().size(), 700u);                   // and cut
  // A tuple's first element is the output; one that is no tensor is named.
  auto count_first = ScriptedModel::Load(Path("count_first"), "cross_entropy").value();
  auto counted = count_first->TryForward({torch::randn({2, 64})});
  EXPECT_EQ(counted.status().code(), Code::kInvalidArgument);
  EXPECT_NE(counted.status().message().find("a Tuple whose first element is Int, not a Tensor"),
            std::string::npos)
      << counted.status().message();
}

// A tied weight is one parameter (one optimiser step, one slot in the segment); a frozen one is
// a buffer (no optimiser, no gradient bucket, not in the segment).
TEST_F(ScriptedModelTest, TiedWeightsOnceAndFrozenOnesAsBuffers) {
  auto tied = ScriptedModel::Load(Path("tied"), "cross_entropy").value();
  EXPECT_EQ(tied->parameters().size(), 3u);  // emb.weight (= out.weight), mix.weight, mix.bias
  EXPECT_EQ(tied->parameter_names()[0], "emb.weight");
  auto partly = ScriptedModel::Load(Path("partly_frozen"), "cross_entropy").value();
  EXPECT_EQ(partly->parameters().size(), 2u);  // fc2's
  EXPECT_EQ(partly->frozen(), 2u);             // fc1's
  EXPECT_EQ(partly->parameter_names()[0], "fc2.weight");
  EXPECT_EQ(partly->Untrainable(), "");
  for (const auto& p : partly->parameters()) EXPECT_TRUE(p.requires_grad());
}

// A synthetic tensor set of `n` samples in memory, as the leader lays one out in its segment.
struct SyntheticSet {
  TensorSetHeader h;
  std::vector<char> buf;
};
SyntheticSet MakeSet(const std::vector<InputSpec>& inputs, const TargetSpec& target, int64_t n,
                     uint64_t seed) {
  SyntheticSet s{PlanTensorSet(inputs, target, n).value(), {}};
  s.buf.resize(s.h.total_bytes);
  std::memcpy(s.buf.data(), &s.h, sizeof s.h);
  FillSyntheticTensors(s.h, inputs, target, seed, s.buf.data());
  return s;
}

TEST(TensorSetTest, BatchesPutBWhereTheSpecSaysAndTargetsFollowTheInput) {
  auto inputs = ParseInputs("float32[3,B,4];int64[B,2]:7").value();
  TargetSpec target;
  target.classes = 5;
  auto [h, buf] = MakeSet(inputs, target, 10, 3);
  ASSERT_TRUE(ValidateTensorSet(h, buf.size()).ok());
  std::vector<torch::Tensor> x;
  torch::Tensor y;
  const int64_t idx[] = {1, 3};
  GatherBatch(h, buf.data(), idx, 2, &x, &y);
  EXPECT_EQ(x[0].sizes().vec(), (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(x[1].sizes().vec(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(x[1].scalar_type(), torch::kLong);
  EXPECT_TRUE(x[1].ge(0).all().item<bool>() && x[1].lt(7).all().item<bool>());
  EXPECT_EQ(y.sizes().vec(), (std::vector<int64_t>{2}));
  EXPECT_TRUE(y.ge(0).all().item<bool>() && y.lt(5).all().item<bool>());
  // Sample 3 is the second of the batch, whatever dimension B is.
  std::vector<torch::Tensor> x3;
  torch::Tensor y3;
  const int64_t three[] = {3};
  GatherBatch(h, buf.data(), three, 1, &x3, &y3);
  EXPECT_TRUE(x[0].select(1, 1).equal(x3[0].select(1, 0)));
  EXPECT_EQ(y[1].item<int64_t>(), y3[0].item<int64_t>());
  // The same seed, the same set.
  std::vector<char> again(h.total_bytes);
  FillSyntheticTensors(h, inputs, target, 3, again.data());
  EXPECT_EQ(std::memcmp(buf.data() + sizeof h, again.data() + sizeof h, h.total_bytes - sizeof h),
            0);
}

// A class per position: token inputs [B, T] of a vocabulary the classes cover train on the next
// token (the targets are the sequence moved on by one), other inputs on their sample's class at
// every position.
TEST(TensorSetTest, PerPositionTargetsAreTheNextTokenOrTheSamplesClass) {
  auto tokens = ParseInputs("int64[B,8]:50").value();
  TargetSpec next;
  next.classes = 50;
  next.dims = {8};
  auto [h, buf] = MakeSet(tokens, next, 16, 5);
  std::vector<torch::Tensor> x;
  torch::Tensor y;
  std::vector<int64_t> idx(16);
  for (int64_t i = 0; i < 16; ++i) idx[i] = i;
  GatherBatch(h, buf.data(), idx.data(), 16, &x, &y);
  ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{16, 8}));
  EXPECT_TRUE(y.narrow(1, 0, 7).equal(x[0].narrow(1, 1, 7)));
  EXPECT_TRUE(y.ge(0).all().item<bool>() && y.lt(50).all().item<bool>());

  auto images = ParseInputs("float32[B,4]").value();
  TargetSpec tagged;
  tagged.classes = 3;
  tagged.dims = {6};
  auto [g, gbuf] = MakeSet(images, tagged, 4, 5);
  GatherBatch(g, gbuf.data(), idx.data(), 4, &x, &y);
  ASSERT_EQ(y.sizes().vec(), (std::vector<int64_t>{4, 6}));
  EXPECT_TRUE(y.eq(y.select(1, 0).unsqueeze(1)).all().item<bool>());  // one class a sample
}

// A data set that cannot fit is refused before it is read, with the figures.
TEST(DatasetTest, AFileLargerThanMemoryIsRefusedBeforeItIsRead) {
  EXPECT_TRUE(DatasetFits(uint64_t(10) << 30, uint64_t(24) << 30).ok());  // one copy: the segment
  Status st = DatasetFits(uint64_t(30) << 30, uint64_t(24) << 30);
  EXPECT_EQ(st.code(), Code::kResourceExhausted);
  EXPECT_NE(st.message().find("30720 MiB"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("24576 MiB available"), std::string::npos) << st.message();
}

// Admission counts what each worker holds beside the shared weights: its gradients and momentum,
// its own weights when private, and data_parallel's gradient buckets; and the weights segment.
TEST(AdmissionTest, AModelFilesWorkersNeedTheirCopiesOfTheWeights) {
  ModelFileProbe probe;
  probe.param_bytes = 1000ull << 20;
  probe.step_bytes = 50ull << 20;
  v1::ExperimentSpec spec;
  spec.set_kind("hogwild");
  spec.set_workers(2);
  spec.set_share(true);
  const uint64_t base = kWorkerBaseBytes + probe.step_bytes;
  EXPECT_EQ(ModelFileWorkersNeed(spec, probe),
            2 * (base + 2 * probe.param_bytes) + probe.param_bytes);
  spec.set_share(false);
  EXPECT_EQ(ModelFileWorkersNeed(spec, probe),
            2 * (base + 3 * probe.param_bytes) + probe.param_bytes);
  spec.set_kind("data_parallel");
  const KindCopies buckets = DataParallelKind().ModelFileCopies();  // a copy of the gradients
  EXPECT_EQ(buckets.gradient_copies, 1u);
  EXPECT_EQ(HogwildKind().ModelFileCopies().gradient_copies, 0u);
  EXPECT_EQ(ModelFileWorkersNeed(spec, probe, buckets),
            2 * (base + 4 * probe.param_bytes) + probe.param_bytes);
  // On CUDA the step, gradients and optimiser state are the device's: a worker holds LibTorch
  // with CUDA and its loaded copy of the weights until it moves them.
  spec.set_kind("hogwild");
  spec.set_device("cuda");
  EXPECT_EQ(ModelFileWorkersNeed(spec, probe),
            2 * (kCudaWorkerBytes + probe.param_bytes) + probe.param_bytes);
}

// A model file's steps and warm-up are bounded by what its probe measured unless the user typed
// a step timeout: 100x the probe's step, scaled by the cores' oversubscription, within
// [5 s, the default].
TEST(StepBoundTest, TheProbesStepBoundsTheRunUnlessATimeoutWasGiven) {
  v1::ExperimentSpec s;
  s.set_workers(4);
  s.set_threads(1);
  s.set_step_timeout_ms(1800000);
  s.set_step_timeout_why("the default");
  EXPECT_EQ(ModelFileStepBounds(s, 2'000'000, 2).steps_ms, kStepBoundFloorMs);  // 0.2 s: 5 s
  const StepBounds b = ModelFileStepBounds(s, 1'000'000'000, 2);  // 1 s x 100 x (4 / 2)
  EXPECT_EQ(b.steps_ms, 200000u);
  EXPECT_EQ(b.warm_up_ms, 200000u);  // the probe's two passes hold the warm-up's optimisation
  EXPECT_EQ(b.why,
            "derived from the leader's probe: 100x its 1000 ms step x 2 (workers x threads / "
            "cores), at least 5 s; --step-timeout-ms gives another");
  EXPECT_EQ(ModelFileStepBounds(s, 100'000'000'000, 2).steps_ms, 1800000u);  // at most the default
  s.clear_step_timeout_why();  // given: kept for a step, 0 (off) included; the warm-up's 3 passes
  s.set_step_timeout_ms(5000);
  const StepBounds given = ModelFileStepBounds(s, 1'000'000'000, 2);
  EXPECT_EQ(given.steps_ms, 5000u);
  EXPECT_EQ(given.warm_up_ms, 3u * 5000);
  EXPECT_EQ(given.why, "--step-timeout-ms as given");
  s.set_step_timeout_ms(0);
  EXPECT_EQ(ModelFileStepBounds(s, 1'000'000'000, 2).steps_ms, 0u);
  EXPECT_EQ(ModelFileStepBounds(s, 1'000'000'000, 2).warm_up_ms, 0u);
}

// A tensor file is mapped, not read: its tensors view the file's pages (no copy of the data in
// the process's heap), hold the same values torch.save wrote, and a file whose records were
// compressed, or cut short, is refused naming that.
// The resident size (KiB) of this process's mappings of `path`, by /proc/self/smaps.
uint64_t MappedRssKb(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  uint64_t kb = 0, v = 0;
  bool in_file = false;
  for (std::string line; std::getline(smaps, line);) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') != std::string::npos && line.find(':') > line.find(' '))
      in_file = line.find(path) != std::string::npos;  // a mapping's header line
    else if (in_file && std::sscanf(line.c_str(), "Rss: %lu kB", &v) == 1)
      kb += v;
  }
  return kb;
}

TEST(DatasetTest, ATensorFileIsReadInPlaceFromItsMapping) {
  testing::TempDir dir;
  const std::string file = dir / "set.pt";
  // set.pt; a deflated copy; its first half; and a liar: the pickle of a set of 300000 samples
  // over the records of one of 10 (the same record names, from files called set.pt).
  const auto made = testing::RunCommand(
      {"/usr/bin/python3", "-W", "ignore", "-c",
       "import os, sys, zipfile, torch\n"
       "torch.save({'inputs': torch.arange(3000000, dtype=torch.float32).reshape(1000000, 3), "
       "'targets': torch.arange(1000000) % 7}, sys.argv[1])\n"
       "with zipfile.ZipFile(sys.argv[1]) as z, zipfile.ZipFile(sys.argv[2], 'w', "
       "zipfile.ZIP_DEFLATED) as out:\n"
       "    for i in z.infolist(): out.writestr(i.filename, z.read(i.filename))\n"
       "b = open(sys.argv[1], 'rb').read(); open(sys.argv[3], 'wb').write(b[:len(b) // 2])\n"
       "d = os.path.join(os.path.dirname(sys.argv[4]), 'small'); os.mkdir(d)\n"
       "torch.save({'inputs': torch.zeros(10, 3), 'targets': torch.zeros(10, dtype=torch.long)}, "
       "d + '/set.pt')\n"
       "with zipfile.ZipFile(sys.argv[1]) as big, zipfile.ZipFile(d + '/set.pt') as small, "
       "zipfile.ZipFile(sys.argv[4], 'w', zipfile.ZIP_STORED) as out:\n"
       "    for i in small.infolist(): out.writestr(i.filename, (big if "
       "i.filename.endswith('data.pkl') else small).read(i.filename))\n",
       file, dir / "deflated.pt", dir / "cut.pt", dir / "liar.pt"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto v = MapTensorFile(file);
  ASSERT_TRUE(v.ok()) << v.status().message();
  torch::Tensor x, y;
  for (const auto& kv : v->toGenericDict())
    (kv.key().toStringRef() == "inputs" ? x : y) = kv.value().toTensor();
  EXPECT_TRUE(x.equal(torch::arange(3000000, torch::kFloat).reshape({1000000, 3})));
  EXPECT_TRUE(y.equal(torch::arange(1000000) % 7));
  // x's bytes are the file's mapping: read, they are resident in it (11.4 MiB); let go, they
  // leave this process and still read the same (from the page cache); a tensor of anonymous
  // memory is never let go (it would read back as zeros).
  const uint64_t read_kb = MappedRssKb(file);
  EXPECT_GT(read_kb, 11000u) << "the inputs are not the file's mapping";
  ReleaseFilePages(x);
  ReleaseFilePages(y);
  EXPECT_LT(MappedRssKb(file), 64u) << "from " << read_kb << " KiB";
  EXPECT_TRUE(x.equal(torch::arange(3000000, torch::kFloat).reshape({1000000, 3})));
  torch::Tensor heap = torch::ones({1 << 20});
  ReleaseFilePages(heap);
  EXPECT_EQ(heap.sum().item<double>(), double(1 << 20));
  auto deflated = MapTensorFile(dir / "deflated.pt");
  EXPECT_EQ(deflated.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(deflated.status().message().find("is compressed"), std::string::npos)
      << deflated.status().message();
  auto cut = MapTensorFile(dir / "cut.pt");
  EXPECT_EQ(cut.status().code(), Code::kFailedPrecondition) << cut.status().message();
  auto liar = MapTensorFile(dir / "liar.pt");
  EXPECT_EQ(liar.status().message(), "dataset: a tensor's storage is larger than its record")
      << liar.status().message();
}

}  // namespace
}  // namespace shoal
