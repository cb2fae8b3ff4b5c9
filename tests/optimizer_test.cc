// MakeOptimizer against golden values from torch.optim of PyTorch 1.13: the same start, the same
// gradients, and every parameter element after every step compared. The golden file and the
// script that wrote it are in tests/golden/.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "worker/optimizers/adadelta.h"
#include "worker/optimizers/in_backward.h"
#include "worker/optimizers/optimizers.h"

namespace shoal {
namespace {

using nlohmann::json;

// PyTorch's CPU kernels and LibTorch's are the same code, so the match is expected to be exact
// on the machine that wrote the golden file; the margin is for CPUs whose kernels vectorise
// (and so round) differently. It is 10-100x tighter than rel 1e-5 / abs 1e-6.
constexpr double kRelTol = 1e-6;
constexpr double kAbsTol = 1e-7;

const json& Golden() {
  static const json doc = [] {
    std::ifstream in(SHOAL_SOURCE_DIR "/tests/golden/optimizers.json");
    return in ? json::parse(in, nullptr, /*allow_exceptions=*/false) : json();
  }();
  return doc;
}

const json& Cases() {
  static const json kNone = json::array();
  const json& doc = Golden();
  return doc.is_object() && doc.contains("cases") ? doc["cases"] : kNone;
}

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  for (const auto& c : Cases()) names.push_back(c.at("case").get<std::string>());
  return names;
}

const json& FindCase(const std::string& name) {
  for (const auto& c : Cases()) {
    if (c.at("case") == name) return c;
  }
  static const json kNone;
  return kNone;
}

// The golden options name OptimizerConfig's fields one for one; a key this table lacks is a
// field the C++ side would silently drop, so it fails the test.
OptimizerConfig ConfigFromJson(const json& o) {
  static const std::map<std::string, double OptimizerConfig::*> kDoubles = {
      {"lr", &OptimizerConfig::lr},
      {"momentum", &OptimizerConfig::momentum},
      {"dampening", &OptimizerConfig::dampening},
      {"weight_decay", &OptimizerConfig::weight_decay},
      {"eps", &OptimizerConfig::eps},
      {"lr_decay", &OptimizerConfig::lr_decay},
      {"initial_accumulator_value", &OptimizerConfig::initial_accumulator_value},
      {"rho", &OptimizerConfig::rho},
      {"beta1", &OptimizerConfig::beta1},
      {"beta2", &OptimizerConfig::beta2},
      {"alpha", &OptimizerConfig::alpha}};
  static const std::map<std::string, bool OptimizerConfig::*> kBools = {
      {"amsgrad", &OptimizerConfig::amsgrad}, {"centered", &OptimizerConfig::centered}};
  OptimizerConfig c;
  for (const auto& [key, value] : o.items()) {
    if (key == "name") {
      c.name = value.get<std::string>();
    } else if (kDoubles.count(key)) {
      c.*kDoubles.at(key) = value.get<double>();
    } else if (kBools.count(key)) {
      c.*kBools.at(key) = value.get<bool>();
    } else {
      ADD_FAILURE() << "golden option " << key << " has no OptimizerConfig field";
    }
  }
  return c;
}

torch::Tensor TensorFromJson(const json& values, const json& shape) {
  // The values are float32 written as doubles, so the narrowing here is exact.
  const auto v = values.get<std::vector<float>>();
  return torch::tensor(v, torch::kFloat32).reshape(shape.get<std::vector<int64_t>>());
}

// Largest |actual - expected| over the tensor; fails on any element outside the tolerance.
double CompareToGolden(const torch::Tensor& actual, const torch::Tensor& expected,
                       const std::string& where) {
  const auto a = actual.detach().contiguous();
  const auto e = expected.contiguous();
  const float* ap = a.data_ptr<float>();
  const float* ep = e.data_ptr<float>();
  double max_diff = 0;
  int failures = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double diff = std::abs(double(ap[i]) - double(ep[i]));
    max_diff = std::max(max_diff, diff);
    const double tol = std::max(kAbsTol, kRelTol * std::abs(double(ep[i])));
    if (diff > tol && failures++ < 5) {
      ADD_FAILURE() << where << " element " << i << ": got " << ap[i] << ", PyTorch " << ep[i]
                    << " (diff " << diff << ")";
    }
  }
  return max_diff;
}

class GoldenTest : public testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesPyTorch113) {
  const json& c = FindCase(GetParam());
  ASSERT_TRUE(c.is_object());
  const json& shapes = c.at("shapes");
  std::vector<torch::Tensor> params;
  for (size_t i = 0; i < shapes.size(); ++i) {
    params.push_back(TensorFromJson(c.at("initial")[i], shapes[i]).requires_grad_());
  }
  auto opt = MakeOptimizer(ConfigFromJson(c.at("options")), params);
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();

  double max_diff = 0;
  const json& steps = c.at("steps");
  for (size_t s = 0; s < steps.size(); ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].mutable_grad() = TensorFromJson(steps[s].at("grads")[i], shapes[i]);
    }
    (*opt)->step();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto where =
          GetParam() + " step " + std::to_string(s + 1) + " param " + std::to_string(i);
      const auto expected = TensorFromJson(steps[s].at("params")[i], shapes[i]);
      max_diff = std::max(max_diff, CompareToGolden(params[i], expected, where));
    }
  }
  RecordProperty("max_abs_diff", std::to_string(max_diff));
  std::printf("[ golden   ] %s: max |C++ - PyTorch| = %.9g over %zu steps\n", GetParam().c_str(),
              max_diff, steps.size());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, GoldenTest, testing::ValuesIn(CaseNames()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Two weights, the first read twice in the pass (tied), trained `steps` steps on fixed batches.
std::vector<torch::Tensor> TrainTied(const OptimizerConfig& c, bool in_backward, int steps) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> w = {torch::randn({8, 6}).requires_grad_(),
                                  torch::randn({3, 8}).requires_grad_()};
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (in_backward) {
    auto made = InBackwardOptimizer::Make(c, w);
    EXPECT_TRUE(made.ok()) << made.status().message();
    opt = std::move(made).value();
  } else {
    auto made = MakeOptimizer(c, w);
    EXPECT_TRUE(made.ok()) << made.status().message();
    opt = std::move(made).value();
  }
  for (int s = 0; s < steps; ++s) {
    const torch::Tensor x = torch::randn({4, 6});
    const torch::Tensor h = x.matmul(w[0].t());
    const torch::Tensor out = torch::tanh(h).matmul(w[1].t()) + h.sum(1, true);
    opt->zero_grad();
    out.pow(2).mean().backward();
    if (in_backward) {  // stepped and let go within the pass
      for (const auto& p : w) EXPECT_FALSE(p.grad().defined());
    }
    opt->step();
  }
  return {w[0].detach().clone(), w[1].detach().clone()};
}

// Stepped inside the backward pass, every optimiser makes the update it makes after the pass:
// the same weights, to the bit, after 5 steps with a weight read twice (each golden case's
// options), and no gradient is left held.
TEST(OptimizersTest, SteppedInTheBackwardPassTheUpdateIsTheSame) {
  ASSERT_FALSE(Cases().empty());
  std::set<std::string> names;
  for (const auto& c : Cases()) {
    const OptimizerConfig config = ConfigFromJson(c.at("options"));
    names.insert(config.name);
    const auto after = TrainTied(config, false, 5), within = TrainTied(config, true, 5);
    for (size_t i = 0; i < after.size(); ++i) {
      EXPECT_TRUE(torch::equal(after[i], within[i]))
          << c.at("case") << " weight " << i << ": max diff "
          << (after[i] - within[i]).abs().max().item<float>();
    }
    EXPECT_FALSE(torch::equal(after[0], TrainTied(config, false, 0)[0])) << "it trained";
  }
  EXPECT_EQ(names.size(), OptimizerNames().size());
}

TEST(OptimizersTest, GoldenFileCoversEveryOptimizer) {
  ASSERT_GE(Cases().size(), 11u) << "missing or short " SHOAL_SOURCE_DIR
                                    "/tests/golden/optimizers.json";
  std::set<std::string> covered;
  for (const auto& c : Cases()) covered.insert(c.at("options").at("name").get<std::string>());
  for (const auto& name : OptimizerNames()) EXPECT_TRUE(covered.count(name)) << name;
}

TEST(OptimizersTest, NamesAreTheSevenInOrder) {
  EXPECT_EQ(OptimizerNames(), (std::vector<std::string>{"sgd", "nesterov", "adagrad", "adadelta",
                                                        "adam", "adamw", "rmsprop"}));
}

TEST(OptimizersTest, UnknownNameIsRefusedByName) {
  OptimizerConfig c;
  c.name = "lion";
  c.lr = 0.1;
  auto opt = MakeOptimizer(c, {torch::zeros({2}, torch::requires_grad())});
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), Code::kInvalidArgument);
  EXPECT_NE(opt.status().message().find("\"lion\""), std::string::npos) << opt.status().message();
}

TEST(OptimizersTest, ValuesTheOptimizerRefusesAreInvalidArgument) {
  OptimizerConfig c;
  c.name = "nesterov";  // like torch.optim.SGD: nesterov needs momentum and no dampening
  c.lr = 0.1;
  c.momentum = 0.9;
  c.dampening = 0.1;
  auto opt = MakeOptimizer(c, {torch::zeros({2}, torch::requires_grad())});
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), Code::kInvalidArgument);
  EXPECT_NE(opt.status().message().find("Nesterov"), std::string::npos) << opt.status().message();
}

// Fixed, distinct gradients for the Adadelta state tests.
std::vector<torch::Tensor> Grads(int step) {
  return {torch::linspace(-1, 1, 12).reshape({3, 4}) * (step + 1),
          torch::linspace(0.5, -2, 5) / (step + 1)};
}

std::vector<torch::Tensor> Start() {
  return {torch::linspace(-0.3, 0.4, 12).reshape({3, 4}).requires_grad_(),
          torch::linspace(1, 2, 5).requires_grad_()};
}

void StepWith(torch::optim::Optimizer& opt, std::vector<torch::Tensor>& params, int step) {
  const auto grads = Grads(step);
  for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = grads[i].clone();
  opt.step();
}

const AdadeltaParamState& StateOf(const torch::optim::Optimizer& opt, const torch::Tensor& p) {
  return static_cast<const AdadeltaParamState&>(
      *opt.state().at(c10::guts::to_string(p.unsafeGetTensorImpl())));
}

TEST(AdadeltaTest, StateCarriesAcrossStepCalls) {
  const auto options = AdadeltaOptions(0.5).weight_decay(1e-2);
  auto pa = Start(), pb = Start(), pc = Start();
  Adadelta a(pa, options), b(pb, options);
  for (int s = 0; s < 4; ++s) {
    StepWith(a, pa, s);
    StepWith(b, pb, s);
    // An optimiser built afresh every step has no history: from step 2 on it must differ.
    Adadelta fresh(pc, options);
    StepWith(fresh, pc, s);
  }
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i], pb[i])) << "param " << i;
    EXPECT_TRUE(StateOf(a, pa[i]) == StateOf(b, pb[i])) << "param " << i;
    EXPECT_EQ(StateOf(a, pa[i]).step(), 4);
    EXPECT_GT(StateOf(a, pa[i]).acc_delta().abs().sum().item<float>(), 0.f);
    EXPECT_FALSE(torch::allclose(pa[i], pc[i])) << "state had no effect on param " << i;
  }
}

TEST(AdadeltaTest, SaveLoadKeepsState) {
  auto pa = Start(), pb = Start();
  Adadelta a(pa), b(pb);
  for (int s = 0; s < 2; ++s) {
    StepWith(a, pa, s);
    StepWith(b, pb, s);
  }
  std::stringstream saved;
  {
    torch::serialize::OutputArchive out;
    a.save(out);
    out.save_to(saved);
  }
  auto pc = Start();
  for (size_t i = 0; i < pc.size(); ++i) pc[i].detach().copy_(pa[i].detach());
  // LibTorch's load() restores per-parameter state only, not the param groups' options, so c is
  // built with a's options.
  Adadelta c(pc);
  torch::serialize::InputArchive in;
  in.load_from(saved);
  c.load(in);
  for (size_t i = 0; i < pc.size(); ++i) {
    EXPECT_TRUE(StateOf(c, pc[i]) == StateOf(a, pa[i])) << "param " << i;
  }
  for (int s = 2; s < 4; ++s) {
    StepWith(b, pb, s);
    StepWith(c, pc, s);
  }
  for (size_t i = 0; i < pb.size(); ++i) EXPECT_TRUE(torch::equal(pb[i], pc[i])) << i;
}

// torch.optim.Adadelta updates a complex parameter as its (real, imag) pairs.
TEST(AdadeltaTest, ComplexParamStepsLikeItsRealView) {
  auto z = torch::complex(torch::linspace(-1, 1, 6), torch::linspace(2, 0, 6)).requires_grad_();
  auto r = torch::view_as_real(z.detach()).clone().requires_grad_();
  std::vector<torch::Tensor> pz = {z}, pr = {r};
  Adadelta oz(pz, AdadeltaOptions(0.5).weight_decay(0.1)),
      orr(pr, AdadeltaOptions(0.5).weight_decay(0.1));
  for (int s = 0; s < 3; ++s) {
    const auto g = torch::complex(torch::linspace(0.5, -1, 6) * (s + 1), torch::linspace(-1, 3, 6));
    z.mutable_grad() = g;
    r.mutable_grad() = torch::view_as_real(g).clone();
    oz.step();
    orr.step();
  }
  EXPECT_TRUE(torch::equal(torch::view_as_real(z.detach()), r.detach()));
}

}  // namespace
}  // namespace shoal
