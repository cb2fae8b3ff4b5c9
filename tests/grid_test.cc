// The sweep's grid (shared/spec/sweep.h): axes over any field of the spec table, expanded in the
// table's order whatever order they were given in, and every way a sweep is refused.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "shared/spec/spec.h"
#include "shared/spec/spec_fields.h"
#include "shared/spec/sweep.h"

namespace shoal {
namespace {

using Values = std::vector<std::pair<std::string, std::string>>;

// The legacy lists of sweeps stored before axes existed.
v1::SweepSpec Legacy(std::vector<uint32_t> workers, std::vector<std::string> starts,
                     std::vector<bool> shares, std::vector<std::string> devices) {
  v1::SweepSpec s;
  s.mutable_base()->set_dataset("synthetic");
  for (auto w : workers) s.add_workers(w);
  for (auto& x : starts) s.add_start(x);
  for (bool b : shares) s.add_share(b);
  for (auto& d : devices) s.add_device(d);
  return s;
}

void AddAxis(v1::SweepSpec* s, const std::string& field, const std::vector<std::string>& values) {
  v1::Axis* a = s->add_axes();
  a->set_field(field);
  for (const auto& v : values) a->add_values(v);
}

// The point's values as (field, value) pairs, in the order the point lists them.
Values PointValues(const v1::SweepPoint& p) {
  Values out;
  for (const auto& v : p.values()) out.emplace_back(v.field(), v.value());
  return out;
}

std::string Text(const v1::ExperimentSpec& s, const std::string& field) {
  return SpecFieldText(s, *FindSpecField(field));
}

std::string Refusal(const v1::SweepSpec& s, const SpecLimits& limits = SpecLimits{}) {
  auto g = ExpandGrid(s, limits);
  if (g.ok()) return "(accepted)";
  EXPECT_EQ(g.status().code(), Code::kInvalidArgument);
  return g.status().message();
}

// --- Kept from the fixed-layout era: the legacy lists are read as axes. ---

TEST(GridTest, CartesianProductInStableOrder) {
  auto g = ExpandGrid(Legacy({1, 2}, {"fork", "spawn"}, {true, false}, {"cpu"}), SpecLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 8u);
  const char* want[] = {"fork/1/1",  "fork/1/2",  "fork/0/1",  "fork/0/2",
                        "spawn/1/1", "spawn/1/2", "spawn/0/1", "spawn/0/2"};
  for (size_t i = 0; i < 8; ++i) {
    const auto& p = (*g)[i].point;
    EXPECT_EQ(p.index(), i);
    EXPECT_EQ(p.start() + "/" + std::to_string(p.share()) + "/" + std::to_string(p.workers()),
              want[i]);
    EXPECT_EQ((*g)[i].spec.workers(), p.workers());
    EXPECT_EQ((*g)[i].spec.threads(), std::max(1u, SpecLimits{}.cores / p.workers()));
  }
}

// Repeats are interleaved: every cell's first run, then every cell's second, so that drift over
// the sweep falls on every point alike.
TEST(GridTest, RepeatsRunRoundRobinOverThePoints) {
  v1::SweepSpec s = Legacy({}, {}, {}, {});
  AddAxis(&s, "workers", {"1", "2"});
  s.set_repeats(3);
  auto g = ExpandGrid(s, SpecLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 6u);
  v1::Sweep sw;
  *sw.mutable_spec() = s;
  for (const auto& x : *g) *sw.add_points() = x.point;
  EXPECT_EQ(Cells(sw), 2u);
  for (size_t i = 0; i < 6; ++i) {
    const auto& p = (*g)[i].point;
    EXPECT_EQ(p.index(), i);
    EXPECT_EQ(p.repeat(), i / 2);
    EXPECT_EQ(CellOf(sw, p), i % 2);
    EXPECT_EQ(p.workers(), i % 2 == 0 ? 1u : 2u);
    EXPECT_EQ((*g)[i].spec.workers(), p.workers());
  }
}

TEST(GridTest, RepeatsOutOfRangeOrTooManyRunsAreRefused) {
  v1::SweepSpec s = Legacy({}, {}, {}, {});
  AddAxis(&s, "workers", {"1", "2"});
  s.set_repeats(0);
  EXPECT_EQ(Refusal(s), "repeats: 0 is not in 1..100");
  s.set_repeats(101);
  EXPECT_EQ(Refusal(s), "repeats: 101 is not in 1..100");
  std::vector<std::string> many;
  for (int b = 1; b <= 11; ++b) many.push_back(std::to_string(b));
  AddAxis(&s, "batch_size", many);
  s.set_repeats(100);  // 22 points x 100 runs
  EXPECT_EQ(Refusal(s),
            "sweep: more than 1000 points (runs: grid points x repeats); on Slurm (--slurm), up to "
            "100000");
  // On Slurm, whose nodes run them at once, a whole study: 2,200 runs here, up to 100,000.
  s.mutable_slurm();
  EXPECT_EQ(Refusal(s), "(accepted)");
  std::vector<std::string> thousand;
  for (int b = 1; b <= 1000; ++b) thousand.push_back(std::to_string(b));
  v1::SweepSpec huge = s;
  huge.clear_axes();
  AddAxis(&huge, "batch_size", thousand);
  huge.set_repeats(100);
  AddAxis(&huge, "lr", {"0.1", "0.01"});  // 200,000 runs
  EXPECT_EQ(Refusal(huge), "sweep: more than 100000 points (runs: grid points x repeats) on Slurm");
  s.clear_slurm();
  s.set_repeats(45);  // 990 runs
  EXPECT_EQ(Refusal(s), "(accepted)");
}

// --- Sweeps that stop where memory ends. ---

v1::SweepPoint At(const Values& values) {
  v1::SweepPoint p;
  for (const auto& [f, v] : values) {
    auto* x = p.add_values();
    x->set_field(f);
    x->set_value(v);
  }
  return p;
}

TEST(GridTest, OutOfMemoryIsReadFromEveryWayAnExperimentRunsOutOfIt) {
  for (const char* e :
       {"worker 1 killed by signal 9 (likely out of memory: the kernel's OOM killer killed 1 "
        "process(es) on this machine during this experiment)",
        "worker 0: CUDA out of memory. Tried to allocate 2.00 GiB",
        "worker 0: [enforce fail at alloc_cpu.cpp:75] DefaultCPUAllocator: can't allocate memory",
        "does not fit: needs ~30.1 GiB of memory, MemAvailable is 20.0 GiB (use --force to start "
        "anyway)",
        "worker 2: std::bad_alloc"})
    EXPECT_TRUE(IsOutOfMemory(e)) << e;
  for (const char* e : {"worker 1 killed by signal 9", "diverged", "worker 0: stalled", ""})
    EXPECT_FALSE(IsOutOfMemory(e)) << e;
}

TEST(GridTest, APointNeedsMoreAlongOneGrowingAxisOfItsRow) {
  const auto p = At({{"start", "fork"}, {"workers", "4"}});
  EXPECT_TRUE(NeedsMoreThan(At({{"start", "fork"}, {"workers", "8"}}), p));
  EXPECT_FALSE(NeedsMoreThan(At({{"start", "fork"}, {"workers", "4"}}), p));  // itself
  EXPECT_FALSE(NeedsMoreThan(At({{"start", "fork"}, {"workers", "2"}}), p));
  EXPECT_FALSE(NeedsMoreThan(At({{"start", "spawn"}, {"workers", "8"}}), p));  // another row
  // An axis that does not grow memory is never "more", whatever its values.
  EXPECT_FALSE(NeedsMoreThan(At({{"seed", "2"}}), At({{"seed", "1"}})));
  EXPECT_FALSE(NeedsMoreThan(At({{"lr", "0.1"}}), At({{"lr", "0.01"}})));
}

TEST(GridTest, APointNeedsMoreAlongTwoGrowingAxesWhenNoneShrinks) {
  const auto p = At({{"batch_size", "256"}, {"workers", "4"}});
  EXPECT_TRUE(NeedsMoreThan(At({{"batch_size", "256"}, {"workers", "16"}}), p));
  EXPECT_TRUE(NeedsMoreThan(At({{"batch_size", "1024"}, {"workers", "4"}}), p));
  EXPECT_TRUE(NeedsMoreThan(At({{"batch_size", "1024"}, {"workers", "16"}}), p));
  // More of one, less of the other: it may fit; it runs.
  EXPECT_FALSE(NeedsMoreThan(At({{"batch_size", "1024"}, {"workers", "1"}}), p));
  EXPECT_FALSE(NeedsMoreThan(At({{"batch_size", "64"}, {"workers", "16"}}), p));
  EXPECT_EQ(DescribePoint(p), "batch_size 256, workers 4");
}

TEST(GridTest, GpuPointsAreExplainedNotRun) {
  auto g = ExpandGrid(Legacy({1}, {"fork", "spawn"}, {true}, {"cpu", "cuda"}), SpecLimits{});
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->size(), 4u);
  EXPECT_TRUE((*g)[0].point.note().empty());
  EXPECT_EQ((*g)[1].point.note().rfind("impossible: fork + cuda + shared weights", 0), 0u);
  EXPECT_EQ((*g)[3].point.note().rfind("no GPU", 0), 0u);
}

TEST(GridTest, BadValuesRefuseTheSweep) {
  EXPECT_NE(Refusal(Legacy({1, 100}, {"fork"}, {true}, {"cpu"})).find("workers: 100"),
            std::string::npos);
  EXPECT_NE(Refusal(Legacy({1}, {"vfork"}, {true}, {"cpu"})).find("start: 'vfork'"),
            std::string::npos);
  EXPECT_NE(Refusal(Legacy({1, 1}, {"fork"}, {true}, {"cpu"})).find("listed twice"),
            std::string::npos);
  std::vector<uint32_t> many;
  for (uint32_t i = 1; i <= 100; ++i) many.push_back(i);
  SpecLimits wide;
  wide.max_workers = 1000;
  EXPECT_EQ(
      Refusal(Legacy(many, {"fork", "spawn", "forkserver"}, {true, false}, {"cpu", "cuda"}), wide),
      "sweep: more than 1000 points; on Slurm (--slurm), up to 100000");
}

// --- Axes over any field. ---

TEST(GridTest, AxesFollowTheFieldTableWhateverOrderTheyAreGivenIn) {
  v1::SweepSpec s;
  AddAxis(&s, "lr", {"0.1", "0.01"});
  AddAxis(&s, "batch-size", {"32", "16"});  // the flag spelling is accepted
  AddAxis(&s, "optimizer", {"sgd", "adam"});
  auto axes = SweepAxes(s);
  ASSERT_TRUE(axes.ok()) << axes.status().message();
  ASSERT_EQ(axes->size(), 3u);
  EXPECT_EQ((*axes)[0].field(), "optimizer");
  EXPECT_EQ((*axes)[1].field(), "lr");
  EXPECT_EQ((*axes)[2].field(), "batch_size");  // spelt as the table spells it
  // Each axis keeps its values in the order given.
  EXPECT_EQ((*axes)[2].values(0), "32");
  EXPECT_EQ((*axes)[2].values(1), "16");

  SpecLimits limits;
  limits.cores = 4;
  auto g = ExpandGrid(s, limits);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 8u);
  // optimizer slowest, then lr, batch_size fastest.
  const std::vector<Values> want = {
      {{"optimizer", "sgd"}, {"lr", "0.1"}, {"batch_size", "32"}},
      {{"optimizer", "sgd"}, {"lr", "0.1"}, {"batch_size", "16"}},
      {{"optimizer", "sgd"}, {"lr", "0.01"}, {"batch_size", "32"}},
      {{"optimizer", "sgd"}, {"lr", "0.01"}, {"batch_size", "16"}},
      {{"optimizer", "adam"}, {"lr", "0.1"}, {"batch_size", "32"}},
      {{"optimizer", "adam"}, {"lr", "0.1"}, {"batch_size", "16"}},
      {{"optimizer", "adam"}, {"lr", "0.01"}, {"batch_size", "32"}},
      {{"optimizer", "adam"}, {"lr", "0.01"}, {"batch_size", "16"}},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("point " + std::to_string(i));
    const GridPoint& gp = (*g)[i];
    EXPECT_EQ(gp.point.index(), i);
    EXPECT_EQ(PointValues(gp.point), want[i]);
    EXPECT_TRUE(gp.point.note().empty());
    // The resolved spec: the axis values, and the defaults of the point's own optimiser.
    const v1::ExperimentSpec& sp = gp.spec;
    EXPECT_EQ(sp.optimizer().name(), want[i][0].second);
    EXPECT_EQ(sp.optimizer().lr(), i % 4 < 2 ? 0.1 : 0.01);
    EXPECT_EQ(sp.batch_size(), i % 2 == 0 ? 32u : 16u);
    EXPECT_EQ(sp.workers(), 1u);
    EXPECT_EQ(sp.threads(), 4u);
    EXPECT_EQ(sp.batches(), kDefaultBatches);
    EXPECT_FALSE(sp.has_epochs());
    EXPECT_EQ(sp.start(), "fork");
    EXPECT_EQ(sp.device(), "cpu");
    EXPECT_TRUE(sp.share());
    if (i < 4) {
      EXPECT_EQ(Text(sp, "momentum"), "0.5");
      EXPECT_EQ(Text(sp, "dampening"), "0");
      EXPECT_EQ(Text(sp, "beta1"), "");
      EXPECT_EQ(Text(sp, "eps"), "");
    } else {
      EXPECT_EQ(Text(sp, "momentum"), "");
      EXPECT_EQ(Text(sp, "beta1"), "0.9");
      EXPECT_EQ(Text(sp, "beta2"), "0.999");
      EXPECT_EQ(Text(sp, "eps"), "1e-08");
      EXPECT_EQ(Text(sp, "amsgrad"), "no");
    }
    EXPECT_EQ(Text(sp, "weight_decay"), "0");
    // The legacy columns of the point mirror the resolved spec.
    EXPECT_EQ(gp.point.workers(), 1u);
    EXPECT_EQ(gp.point.start(), "fork");
    EXPECT_TRUE(gp.point.share());
    EXPECT_EQ(gp.point.device(), "cpu");
  }
}

TEST(GridTest, WorkersTurnFastestAndTheFirstFieldSlowest) {
  v1::SweepSpec s;
  s.mutable_base()->set_epochs(2);
  AddAxis(&s, "workers", {"4", "1"});
  AddAxis(&s, "seed", {"7", "8"});
  AddAxis(&s, "start", {"spawn", "fork"});
  SpecLimits limits;
  limits.cores = 8;
  auto g = ExpandGrid(s, limits);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 8u);
  const std::vector<Values> want = {
      {{"start", "spawn"}, {"seed", "7"}, {"workers", "4"}},
      {{"start", "spawn"}, {"seed", "7"}, {"workers", "1"}},
      {{"start", "spawn"}, {"seed", "8"}, {"workers", "4"}},
      {{"start", "spawn"}, {"seed", "8"}, {"workers", "1"}},
      {{"start", "fork"}, {"seed", "7"}, {"workers", "4"}},
      {{"start", "fork"}, {"seed", "7"}, {"workers", "1"}},
      {{"start", "fork"}, {"seed", "8"}, {"workers", "4"}},
      {{"start", "fork"}, {"seed", "8"}, {"workers", "1"}},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("point " + std::to_string(i));
    const GridPoint& gp = (*g)[i];
    EXPECT_EQ(PointValues(gp.point), want[i]);
    EXPECT_EQ(gp.spec.start(), want[i][0].second);
    EXPECT_EQ(gp.spec.seed(), i % 4 < 2 ? 7u : 8u);
    EXPECT_EQ(gp.spec.workers(), i % 2 == 0 ? 4u : 1u);
    EXPECT_EQ(gp.point.workers(), gp.spec.workers());
    EXPECT_EQ(gp.point.start(), gp.spec.start());
    EXPECT_EQ(gp.spec.threads(), i % 2 == 0 ? 2u : 8u);  // floor(cores / workers)
    EXPECT_EQ(gp.spec.epochs(), 2u);                     // from the base
    EXPECT_FALSE(gp.spec.has_batches());
  }
}

TEST(GridTest, OneValueAxisIsAPointValueButMultipliesNothing) {
  v1::SweepSpec s;
  AddAxis(&s, "allocator", {"retain"});
  AddAxis(&s, "batches", {"5", "6"});
  auto g = ExpandGrid(s, SpecLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 2u);
  EXPECT_EQ(PointValues((*g)[0].point), (Values{{"batches", "5"}, {"allocator", "retain"}}));
  EXPECT_EQ(PointValues((*g)[1].point), (Values{{"batches", "6"}, {"allocator", "retain"}}));
  EXPECT_EQ((*g)[1].spec.allocator(), "retain");
  EXPECT_EQ((*g)[1].spec.batches(), 6u);
}

TEST(GridTest, NoAxesIsOnePointOfTheBase) {
  v1::SweepSpec s;
  s.mutable_base()->set_workers(3);
  auto g = ExpandGrid(s, SpecLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 1u);
  EXPECT_EQ((*g)[0].point.values_size(), 0);
  EXPECT_EQ((*g)[0].spec.workers(), 3u);
  EXPECT_EQ((*g)[0].point.workers(), 3u);
}

TEST(GridTest, LegacyListsAreAxesAndMixWithNewAxes) {
  v1::SweepSpec s = Legacy({2, 1}, {}, {false, true}, {});
  AddAxis(&s, "batch_size", {"8", "16"});
  auto axes = SweepAxes(s);
  ASSERT_TRUE(axes.ok()) << axes.status().message();
  ASSERT_EQ(axes->size(), 3u);
  EXPECT_EQ((*axes)[0].field(), "share");
  EXPECT_EQ((*axes)[0].values(0), "no");
  EXPECT_EQ((*axes)[0].values(1), "yes");
  EXPECT_EQ((*axes)[1].field(), "batch_size");
  EXPECT_EQ((*axes)[2].field(), "workers");
  EXPECT_EQ((*axes)[2].values(0), "2");
  EXPECT_EQ((*axes)[2].values(1), "1");

  auto g = ExpandGrid(s, SpecLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 8u);
  EXPECT_EQ(PointValues((*g)[0].point),
            (Values{{"share", "no"}, {"batch_size", "8"}, {"workers", "2"}}));
  EXPECT_EQ(PointValues((*g)[3].point),
            (Values{{"share", "no"}, {"batch_size", "16"}, {"workers", "1"}}));
  EXPECT_EQ(PointValues((*g)[6].point),
            (Values{{"share", "yes"}, {"batch_size", "16"}, {"workers", "2"}}));
  EXPECT_FALSE((*g)[0].spec.share());
  EXPECT_FALSE((*g)[0].point.share());
  EXPECT_TRUE((*g)[6].spec.share());
  EXPECT_EQ((*g)[6].spec.batch_size(), 16u);
  EXPECT_EQ((*g)[6].spec.workers(), 2u);
}

// --- Refusals. ---

TEST(GridTest, RefusesAFieldThatIsNotAnAxis) {
  const std::string fields =
      "(fields: kind, model, dataset, start, share, device, cuda_sync, optimizer, lr, momentum, "
      "dampening, "
      "weight_decay, eps, lr_decay, initial_accumulator_value, rho, beta1, beta2, amsgrad, alpha, "
      "centered, optimizer_in_backward, batch_size, batches, epochs, epoch_samples, threads, seed, "
      "allocator, "
      "concurrent_steps, activations, kernels, eval_samples, sample_interval_ms, stall_timeout_ms, "
      "step_timeout_ms, "
      "model_file, input, loss, classes, memory_format, autocast, nodes, node_rank, master, "
      "models, iterations, loaders, prefetch, "
      "pin_memory, layers, filters, stages, chunks, checkpoint, scaling, "
      "touch_mib, hold_ms, workers)";
  for (const std::string field : {"colour", "name", "force"}) {
    SCOPED_TRACE(field);
    v1::SweepSpec s;
    AddAxis(&s, field, {"a", "b"});
    EXPECT_EQ(Refusal(s), "axes: '" + field + "' is not a field a sweep can vary " + fields);
    EXPECT_EQ(SweepAxes(s).status().code(), Code::kInvalidArgument);
  }
}

TEST(GridTest, RefusesAnAxisWithNoValues) {
  v1::SweepSpec s;
  AddAxis(&s, "seed", {});
  EXPECT_EQ(Refusal(s), "seed: an axis needs at least one value");
}

TEST(GridTest, RefusesARepeatedValue) {
  v1::SweepSpec s;
  AddAxis(&s, "lr", {"0.1", "0.2", "0.1"});
  EXPECT_EQ(Refusal(s), "lr: a value is listed twice");
}

TEST(GridTest, RefusesAValueRepeatedInAnotherSpelling) {
  v1::SweepSpec s;
  AddAxis(&s, "batch_size", {"16", "016"});
  EXPECT_EQ(Refusal(s), "batch_size: a value is listed twice");
  v1::SweepSpec b;
  AddAxis(&b, "share", {"yes", "true"});
  EXPECT_EQ(Refusal(b), "share: a value is listed twice");
}

TEST(GridTest, RefusesAFieldSweptTwice) {
  v1::SweepSpec s;
  AddAxis(&s, "batch_size", {"8"});
  AddAxis(&s, "batch-size", {"16"});
  EXPECT_EQ(Refusal(s), "batch_size: swept twice (give one list)");

  v1::SweepSpec legacy = Legacy({1, 2}, {}, {}, {});
  AddAxis(&legacy, "workers", {"4"});
  EXPECT_EQ(Refusal(legacy), "workers: swept twice (give one list)");
}

TEST(GridTest, RefusesAFieldBothFixedAndSwept) {
  v1::SweepSpec s;
  s.mutable_base()->set_batch_size(32);
  AddAxis(&s, "batch_size", {"8", "16"});
  EXPECT_EQ(Refusal(s), "batch_size: given both as a fixed value and as an axis");

  v1::SweepSpec o;
  o.mutable_base()->mutable_optimizer()->set_lr(0.5);
  AddAxis(&o, "lr", {"0.1", "0.2"});
  EXPECT_EQ(Refusal(o), "lr: given both as a fixed value and as an axis");
}

TEST(GridTest, RefusesAValueThatDoesNotParse) {
  v1::SweepSpec w;
  AddAxis(&w, "workers", {"1", "x"});
  EXPECT_EQ(Refusal(w), "workers: 'x' is not a whole number in 0..4294967295");

  v1::SweepSpec neg;
  AddAxis(&neg, "batch_size", {"-1"});
  EXPECT_EQ(Refusal(neg), "batch_size: '-1' is not a whole number in 0..4294967295");

  v1::SweepSpec lr;
  AddAxis(&lr, "lr", {"0.1", "fast"});
  EXPECT_EQ(Refusal(lr), "lr: 'fast' is not a finite number");
  // Plain decimals only, as whole numbers are digits only: no blanks, hex, inf or nan.
  for (const char* odd : {" 0.1", "0x1p-3", "inf", "nan", "0.1 "}) {
    v1::SweepSpec x;
    AddAxis(&x, "lr", {"0.2", odd});
    EXPECT_EQ(Refusal(x), std::string("lr: '") + odd + "' is not a finite number");
  }
  v1::SweepSpec ok;
  AddAxis(&ok, "lr", {"1e-3", "+.5", "2."});
  EXPECT_EQ(Refusal(ok), "(accepted)");

  v1::SweepSpec share;
  AddAxis(&share, "share", {"maybe"});
  EXPECT_EQ(Refusal(share), "share: 'maybe' is not one of: yes, no");
}

TEST(GridTest, RefusesWorkersZeroByValidation) {
  v1::SweepSpec s;
  AddAxis(&s, "workers", {"1", "0"});
  EXPECT_EQ(Refusal(s), "sweep point 1: workers: 0 is outside the allowed range 1..64");

  SpecLimits small;
  small.max_workers = 8;
  v1::SweepSpec big;
  AddAxis(&big, "workers", {"9"});
  EXPECT_EQ(Refusal(big, small), "sweep point 0: workers: 9 is outside the allowed range 1..8");
}

TEST(GridTest, RefusesAnUnknownValueOfAStringField) {
  v1::SweepSpec s;
  AddAxis(&s, "optimizer", {"sgd", "lbfgs"});
  EXPECT_EQ(Refusal(s),
            "sweep point 1: optimizer: 'lbfgs' is not one of: sgd, nesterov, adagrad, adadelta, "
            "adam, adamw, rmsprop");
}

TEST(GridTest, RefusesMoreThanAThousandPoints) {
  std::vector<std::string> forty, twenty_five, twenty_six;
  for (int i = 1; i <= 40; ++i) forty.push_back(std::to_string(i));
  for (int i = 1; i <= 26; ++i) twenty_six.push_back(std::to_string(i));
  twenty_five.assign(twenty_six.begin(), twenty_six.end() - 1);

  v1::SweepSpec over;
  AddAxis(&over, "workers", forty);
  AddAxis(&over, "batch_size", twenty_six);  // 1040 points
  EXPECT_EQ(Refusal(over), "sweep: more than 1000 points; on Slurm (--slurm), up to 100000");

  v1::SweepSpec exactly;
  AddAxis(&exactly, "workers", forty);
  AddAxis(&exactly, "batch_size", twenty_five);  // 1000 points: the limit itself is allowed
  auto g = ExpandGrid(exactly, SpecLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->size(), 1000u);
  EXPECT_EQ(g->back().point.index(), 999u);
  EXPECT_EQ(PointValues(g->back().point), (Values{{"batch_size", "25"}, {"workers", "40"}}));

  std::vector<std::string> seeds;
  for (int i = 0; i <= 1000; ++i) seeds.push_back(std::to_string(i));
  v1::SweepSpec one_axis;
  AddAxis(&one_axis, "seed", seeds);  // 1001 values on one axis
  EXPECT_EQ(Refusal(one_axis), "seed: more than 1000 values");
}

TEST(GridTest, AnOptimiserOptionOfTheBaseThatDoesNotApplyRefusesNamingThePoint) {
  v1::SweepSpec s;
  s.mutable_base()->mutable_optimizer()->set_rho(0.8);
  AddAxis(&s, "optimizer", {"adadelta", "sgd"});
  EXPECT_EQ(Refusal(s), "sweep point 1: rho: does not apply to optimizer sgd (adadelta)");

  // Swept alongside, the option is refused at the first point whose optimiser lacks it.
  v1::SweepSpec m;
  AddAxis(&m, "optimizer", {"sgd", "adam"});
  AddAxis(&m, "momentum", {"0.1", "0.9"});
  EXPECT_EQ(Refusal(m),
            "sweep point 2: momentum: does not apply to optimizer adam (sgd, nesterov, rmsprop)");
}

TEST(GridTest, CudaPointsGetNotesAndStayValidElsewhere) {
  v1::SweepSpec s;
  AddAxis(&s, "device", {"cpu", "cuda"});
  AddAxis(&s, "share", {"yes", "no"});
  AddAxis(&s, "start", {"fork", "spawn"});
  SpecLimits limits;
  limits.cuda_missing = "no GPU: libnvidia-ml.so.1 (NVML) not found";
  auto g = ExpandGrid(s, limits);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 8u);
  const std::string impossible =
      "impossible: fork + cuda + shared weights (a forked child cannot use the CUDA context of "
      "its parent)";
  const std::string no_gpu = limits.cuda_missing;
  // start, share, device: device turns fastest.
  const std::vector<std::pair<Values, std::string>> want = {
      {{{"start", "fork"}, {"share", "yes"}, {"device", "cpu"}}, ""},
      {{{"start", "fork"}, {"share", "yes"}, {"device", "cuda"}}, impossible},
      {{{"start", "fork"}, {"share", "no"}, {"device", "cpu"}}, ""},
      {{{"start", "fork"}, {"share", "no"}, {"device", "cuda"}}, no_gpu},
      {{{"start", "spawn"}, {"share", "yes"}, {"device", "cpu"}}, ""},
      {{{"start", "spawn"}, {"share", "yes"}, {"device", "cuda"}}, no_gpu},
      {{{"start", "spawn"}, {"share", "no"}, {"device", "cpu"}}, ""},
      {{{"start", "spawn"}, {"share", "no"}, {"device", "cuda"}}, no_gpu},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("point " + std::to_string(i));
    const GridPoint& gp = (*g)[i];
    EXPECT_EQ(PointValues(gp.point), want[i].first);
    EXPECT_EQ(gp.point.note(), want[i].second);
    EXPECT_EQ(gp.point.device(), want[i].first[2].second);
    EXPECT_EQ(gp.spec.device(), want[i].first[2].second);  // the spec says what was asked
    EXPECT_TRUE(gp.point.experiment_id().empty());
  }
  // Submitted alone, a cuda point is refused by what this node lacks (FAILED_PRECONDITION), the
  // impossible one by its combination (INVALID_ARGUMENT); on a node with a GPU the rest run.
  const Status lacking = ValidateSpec((*g)[3].spec, limits);
  EXPECT_EQ(lacking.code(), Code::kFailedPrecondition);
  EXPECT_EQ(lacking.message(), "device cuda: " + limits.cuda_missing);
  const Status impossible_alone = ValidateSpec((*g)[1].spec, limits);
  EXPECT_EQ(impossible_alone.code(), Code::kInvalidArgument);
  EXPECT_EQ(impossible_alone.message(), std::string("device: ") + kForkCudaShareWhy);
  SpecLimits gpu_node = limits;
  gpu_node.cuda_missing.clear();
  gpu_node.cuda_devices = 2;  // where the worker sees devices, cuda points name theirs
  EXPECT_TRUE(ValidateSpec((*g)[3].spec, gpu_node).ok());
  auto on_gpu = ExpandGrid(s, gpu_node);
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status().message();
  EXPECT_EQ((*on_gpu)[3].point.note(), "");
  EXPECT_EQ((*on_gpu)[3].spec.cuda_devices(), "0");
  EXPECT_EQ((*on_gpu)[1].point.note(), impossible);
  EXPECT_FALSE((*on_gpu)[0].spec.has_cuda_devices());

  // A point that cannot run must still be a valid spec elsewhere: a bad value there refuses.
  v1::SweepSpec bad;
  bad.mutable_base()->set_batch_size(0);
  AddAxis(&bad, "device", {"cuda"});
  EXPECT_EQ(Refusal(bad), "sweep point 0: batch_size: 0 is outside the allowed range 1..4096");
}

// Kind command's environment variables are axes too ("env.NAME"): each point's env holds its
// value; a name given fixed and swept, a value twice, or a bad name is refused.
TEST(GridTest, AnEnvironmentVariableOfACommandIsAnAxis) {
  v1::SweepSpec s;
  s.mutable_base()->set_kind("command");
  s.mutable_base()->mutable_command()->add_argv("python3");
  s.mutable_base()->mutable_command()->add_env("FIXED=1");
  AddAxis(&s, "env.BATCH", {"32", "128"});
  AddAxis(&s, "workers", {"1", "2"});
  auto grid = ExpandGrid(s, SpecLimits{});
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  ASSERT_EQ(grid->size(), 4u);
  std::set<std::string> seen;
  for (const auto& g : *grid) {
    ASSERT_EQ(g.spec.command().env_size(), 2);
    EXPECT_EQ(g.spec.command().env(0), "FIXED=1");
    seen.insert(g.spec.command().env(1) + " w" + std::to_string(g.spec.workers()));
    const Values v = PointValues(g.point);
    EXPECT_EQ(
        std::count_if(v.begin(), v.end(), [](const auto& x) { return x.first == "env.BATCH"; }), 1);
  }
  EXPECT_EQ(seen,
            (std::set<std::string>{"BATCH=32 w1", "BATCH=32 w2", "BATCH=128 w1", "BATCH=128 w2"}));
  v1::SweepSpec twice = s;
  twice.mutable_base()->mutable_command()->add_env("BATCH=8");
  EXPECT_EQ(ExpandGrid(twice, SpecLimits{}).status().message(),
            "env.BATCH: given both as a fixed value and as an axis");
  v1::SweepSpec dup = s;
  dup.mutable_axes(0)->set_values(1, "32");
  EXPECT_EQ(ExpandGrid(dup, SpecLimits{}).status().message(), "env.BATCH: a value is listed twice");
  v1::SweepSpec reserved = s;
  reserved.mutable_axes(0)->set_field("env.RANK");
  EXPECT_NE(ExpandGrid(reserved, SpecLimits{}).status().message().find("RANK is not yours"),
            std::string::npos);
  v1::SweepSpec bad = s;
  bad.mutable_axes(0)->set_field("env.2X");
  EXPECT_NE(
      ExpandGrid(bad, SpecLimits{}).status().message().find("is not a field a sweep can vary"),
      std::string::npos);
  v1::SweepSpec other = s;
  other.mutable_base()->set_kind("hogwild");
  EXPECT_NE(ExpandGrid(other, SpecLimits{}).status().message().find("runs no program of yours"),
            std::string::npos);
}

}  // namespace
}  // namespace shoal
