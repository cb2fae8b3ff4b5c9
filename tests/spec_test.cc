#include "shared/spec.h"

#include <gtest/gtest.h>

namespace shoal {
namespace {

v1::ExperimentSpec Valid() {
  v1::ExperimentSpec s;
  SpecLimits l;
  l.cores = 8;
  ApplyDefaults(&s, l);
  return s;
}

TEST(SpecTest, DefaultsFollowTheStudy) {
  SpecLimits l;
  l.cores = 8;
  v1::ExperimentSpec s;
  s.set_workers(3);
  ApplyDefaults(&s, l);
  EXPECT_EQ(s.kind(), "hogwild");
  EXPECT_EQ(s.model(), "mnist_convnet");
  EXPECT_EQ(s.batch_size(), 64u);
  EXPECT_DOUBLE_EQ(s.optimizer().lr(), 0.01);
  EXPECT_DOUBLE_EQ(s.optimizer().momentum(), 0.5);
  EXPECT_EQ(s.threads(), 2u);  // floor(8 / 3)
  EXPECT_TRUE(s.share());
  EXPECT_TRUE(ValidateSpec(s, l).ok());
}

TEST(SpecTest, ThreadsAtLeastOne) {
  SpecLimits l;
  l.cores = 2;
  v1::ExperimentSpec s;
  s.set_workers(16);
  ApplyDefaults(&s, l);
  EXPECT_EQ(s.threads(), 1u);
}

TEST(SpecTest, ExplicitZeroMomentumIsKept) {
  v1::ExperimentSpec s;
  s.mutable_optimizer()->set_momentum(0.0);
  ApplyDefaults(&s, SpecLimits{});
  EXPECT_DOUBLE_EQ(s.optimizer().momentum(), 0.0);
}

struct BadCase {
  const char* field;
  std::function<void(v1::ExperimentSpec*)> mutate;
  const char* expect;
};

TEST(SpecTest, EveryBadFieldIsNamedWithItsRange) {
  SpecLimits l;
  std::vector<BadCase> cases = {
      {"kind", [](auto* s) { s->set_kind("nope"); }, "kind: 'nope' is not one of: hogwild"},
      {"model", [](auto* s) { s->set_model("resnet"); }, "model: 'resnet'"},
      {"workers", [](auto* s) { s->set_workers(65); },
       "workers: 65 is outside the allowed range 1..64"},
      {"start", [](auto* s) { s->set_start("vfork"); },
       "start: 'vfork' is not one of: fork, spawn"},
      {"device", [](auto* s) { s->set_device("tpu"); }, "device: 'tpu'"},
      {"device", [](auto* s) { s->set_device("cuda"); }, "device: 'cuda' is not available"},
      {"batch_size", [](auto* s) { s->set_batch_size(5000); },
       "batch_size: 5000 is outside the allowed range 1..4096"},
      {"optimizer.lr", [](auto* s) { s->mutable_optimizer()->set_lr(-1); }, "optimizer.lr"},
      {"optimizer.momentum", [](auto* s) { s->mutable_optimizer()->set_momentum(1.5); },
       "optimizer.momentum"},
      {"sample_interval_ms", [](auto* s) { s->set_sample_interval_ms(5); },
       "sample_interval_ms: 5 is outside the allowed range 20..60000"},
      {"allocator", [](auto* s) { s->set_allocator("tcmalloc"); }, "allocator: 'tcmalloc'"},
      {"eval_samples", [](auto* s) { s->set_eval_samples(20000); }, "eval_samples: 20000"},
  };
  for (const auto& c : cases) {
    auto s = Valid();
    c.mutate(&s);
    Status st = ValidateSpec(s, l);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.field << ": " << st.message();
  }
}

TEST(SpecTest, DatasetMustBeAnMnistDirectory) {
  EXPECT_TRUE(CheckDataset("synthetic").ok());
  Status st = CheckDataset("/nonexistent/dir");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("dataset: '/nonexistent/dir' is not a directory"), std::string::npos);
  st = CheckDataset("/tmp");
  EXPECT_NE(st.message().find("has no train-images"), std::string::npos) << st.message();
}

TEST(SpecTest, JsonRoundTrip) {
  auto s = Valid();
  s.set_workers(4);
  auto back = SpecFromJson(SpecToJson(s));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->SerializeAsString(), s.SerializeAsString());
  EXPECT_FALSE(SpecFromJson("{not json").ok());
}

}  // namespace
}  // namespace shoal
