// A kind joins three registries, one per binary that cannot link the others' code: shoald's and
// the CLI's (shared/kinds/registry.cc: rules and figures, no LibTorch), shoal-worker's
// (worker/kinds/registry.cc: its LibTorch half) and shoal-leader's (worker/kinds/leader_kinds.cc:
// the leaders that need no LibTorch). They must name the same kinds, or a kind shoald accepts
// fails in a worker, or runs with the wrong leader.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "shared/kinds/kind.h"
#include "shared/spec/spec.h"
#include "worker/kind.h"
#include "worker/kinds/leader_kinds.h"

namespace shoal {
namespace {

std::set<std::string> Set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

TEST(KindsAgreeTest, EveryBinaryKnowsTheSameKinds) {
  std::set<std::string> rules = Set(KindNames());
#ifndef SHOAL_WITH_GLOO
  rules.erase("data_parallel");  // a worker-only build without Gloo has no data_parallel
#endif
  EXPECT_EQ(Set(WorkerKindNames()), rules);
  std::set<std::string> leaderless;
  for (const KindRules& k : AllKinds())
    if (k.leader_without_libtorch) leaderless.insert(k.name);
  EXPECT_EQ(Set(LibTorchFreeLeaderKinds()), leaderless);
  for (const std::string& name : WorkerKindNames())
    EXPECT_NE(MakeWorkerKind(name), nullptr) << name;
}

// shoal-leader leads exactly what ChooseLeader gives it: a kind whose rules say its leader needs
// no LibTorch gets one for a spawn start (not the model file's hand-off, which has its own test).
TEST(KindsAgreeTest, ShoalLeaderLeadsWhatChooseLeaderGivesIt) {
  for (const std::string& name : LibTorchFreeLeaderKinds()) {
    v1::ExperimentSpec spec;
    spec.set_kind(name);
    spec.set_start("spawn");
    ApplyDefaults(&spec, SpecLimits{});
    ASSERT_FALSE(ChooseLeader(spec).libtorch) << name << ": " << ChooseLeader(spec).why;
    auto kind = MakeLibTorchFreeLeaderKind(spec);
    ASSERT_TRUE(kind.ok()) << name << ": " << kind.status().message();
  }
  v1::ExperimentSpec pipeline;
  pipeline.set_kind("pipeline");
  ApplyDefaults(&pipeline, SpecLimits{});
  EXPECT_EQ(MakeLibTorchFreeLeaderKind(pipeline).status().code(), Code::kFailedPrecondition);
}

}  // namespace
}  // namespace shoal
