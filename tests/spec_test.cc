#include "shared/spec/spec.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "shared/kinds/kind.h"
#include "shared/spec/spec_fields.h"
#include "shared/spec/wire_check.h"

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

// A spec of `kind`, `prepare` applied before its defaults and `then` after them.
std::function<void(v1::ExperimentSpec*)> OfKind(std::string kind,
                                                std::function<void(v1::ExperimentSpec*)> prepare,
                                                std::function<void(v1::ExperimentSpec*)> then) {
  return [=](v1::ExperimentSpec* s) {
    s->Clear();
    s->set_kind(kind);
    prepare(s);
    ApplyDefaults(s, SpecLimits{});
    then(s);
  };
}

void Nothing(v1::ExperimentSpec*) {}

// The default hogwild spec (Valid()) wrong in one field, and what the refusal must say.
std::vector<BadCase> OneFieldCases() {
  return {
      {"kind", [](auto* s) { s->set_kind("nope"); }, "kind: 'nope' is not one of: hogwild"},
      {"model", [](auto* s) { s->set_model("resnet"); }, "model: 'resnet'"},
      {"workers", [](auto* s) { s->set_workers(65); },
       "workers: 65 is outside the allowed range 1..64"},
      {"start", [](auto* s) { s->set_start("vfork"); },
       "start: 'vfork' is not one of: fork, spawn"},
      {"device", [](auto* s) { s->set_device("tpu"); }, "device: 'tpu'"},
      {"device", [](auto* s) { s->set_device("cuda"); },
       "device: cuda with start fork and shared weights is impossible"},
      {"batch_size", [](auto* s) { s->set_batch_size(5000); },
       "batch_size: 5000 is outside the allowed range 1..4096"},
      {"lr", [](auto* s) { s->mutable_optimizer()->set_lr(-1); },
       "lr: -1 is outside the allowed range (0, 10]"},
      {"momentum", [](auto* s) { s->mutable_optimizer()->set_momentum(1.5); },
       "momentum: 1.5 is outside the allowed range [0, 1)"},
      // As typed, not rounded to the bound it exceeds.
      {"weight_decay", [](auto* s) { s->mutable_optimizer()->set_weight_decay(1.0000001); },
       "weight_decay: 1.0000001 is outside the allowed range [0, 1]"},
      {"optimizer", [](auto* s) { s->mutable_optimizer()->set_name("lbfgs"); },
       "optimizer: 'lbfgs' is not one of: sgd, nesterov, adagrad, adadelta, adam, adamw, rmsprop"},
      {"workers", [](auto* s) { s->set_workers(0); },
       "workers: 0 is outside the allowed range 1..64"},
      {"batches", [](auto* s) { s->set_batches(0); }, "batches: 0 is outside the allowed range"},
      {"batch_size", [](auto* s) { s->set_batch_size(0); }, "batch_size: 0 is outside"},
      {"dataset", [](auto* s) { s->set_dataset(""); }, "dataset: empty"},
      {"name", [](auto* s) { s->set_name(""); }, "name: empty (leave it out for no label)"},
      {"sample_interval_ms", [](auto* s) { s->set_sample_interval_ms(0); },
       "sample_interval_ms: 0 is outside the allowed range 20..60000"},
      {"threads", [](auto* s) { s->set_threads(0); }, "threads: 0 is outside the allowed range"},
      {"epochs", [](auto* s) { s->set_epochs(3); }, "batches, epochs: give one of them"},
      {"sample_interval_ms", [](auto* s) { s->set_sample_interval_ms(5); },
       "sample_interval_ms: 5 is outside the allowed range 20..60000"},
      {"allocator", [](auto* s) { s->set_allocator("tcmalloc"); }, "allocator: 'tcmalloc'"},
      {"activations", [](auto* s) { s->set_activations("fast"); },
       "activations: 'fast' is not one of: pytorch, lean"},
      {"kernels", [](auto* s) { s->set_kernels("mkl"); },
       "kernels: 'mkl' is not one of: shoal, libtorch"},
      {"eval_samples", [](auto* s) { s->set_eval_samples(20000); }, "eval_samples: 20000"},
      {"step_timeout_ms", [](auto* s) { s->set_step_timeout_ms(100); },
       "step_timeout_ms: 100 is outside the allowed range 500..86400000"},
  };
}

// Specs of other kinds wrong in one field.
std::vector<BadCase> OtherKindCases() {
  return {
      {"allocator", OfKind("pipeline", Nothing, [](auto* s) { s->set_allocator("planned"); }),
       "allocator: planned needs a trainer that marks its steps (hogwild, data_parallel); kind "
       "pipeline does not"},
      {"activations",
       OfKind(
           "data_parallel", [](auto* s) { s->set_model("resnet18_cifar"); },
           [](auto* s) { s->set_activations("lean"); }),
       "activations: lean is written for model mnist_convnet only, not resnet18_cifar"},
      {"activations", OfKind("pipeline", Nothing, [](auto* s) { s->set_activations("lean"); }),
       "activations: not a field of kind pipeline"},
      {"batch_size",
       OfKind(
           "pipeline",
           [](auto* s) {
             s->mutable_pipeline()->set_stages(2);
             s->mutable_pipeline()->set_filters(512);
             s->set_batch_size(4096);
           },
           Nothing),
       "images leaves stage 0 as "},
      {"kernels",
       OfKind(
           "command", [](auto* s) { s->mutable_command()->add_argv("true"); },
           [](auto* s) { s->set_kernels("libtorch"); }),
       "kernels: not a field of kind command"},
  };
}

std::vector<BadCase> BadFieldCases() {
  std::vector<BadCase> all = OneFieldCases();
  for (BadCase& c : OtherKindCases()) all.push_back(std::move(c));
  return all;
}

TEST(SpecTest, EveryBadFieldIsNamedWithItsRange) {
  SpecLimits l;
  for (const auto& c : BadFieldCases()) {
    auto s = Valid();
    c.mutate(&s);
    Status st = ValidateSpec(s, l);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.field << ": " << st.message();
  }
}

TEST(SpecTest, EachOptimiserGetsPyTorchDefaultsAndKeepsWhatWasGiven) {
  SpecLimits l;
  v1::ExperimentSpec s;
  s.mutable_optimizer()->set_name("adam");
  s.mutable_optimizer()->set_beta2(0.99);
  ApplyDefaults(&s, l);
  EXPECT_DOUBLE_EQ(s.optimizer().lr(), 0.001);
  EXPECT_DOUBLE_EQ(s.optimizer().beta1(), 0.9);
  EXPECT_DOUBLE_EQ(s.optimizer().beta2(), 0.99);
  EXPECT_DOUBLE_EQ(s.optimizer().eps(), 1e-8);
  EXPECT_FALSE(s.optimizer().amsgrad());
  EXPECT_FALSE(s.optimizer().has_momentum());  // adam has none: not invented
  EXPECT_TRUE(ValidateSpec(s, l).ok());

  v1::ExperimentSpec d;
  d.mutable_optimizer()->set_name("adadelta");
  ApplyDefaults(&d, l);
  EXPECT_DOUBLE_EQ(d.optimizer().lr(), 1.0);
  EXPECT_DOUBLE_EQ(d.optimizer().rho(), 0.9);
  EXPECT_DOUBLE_EQ(d.optimizer().eps(), 1e-6);
  v1::ExperimentSpec w;
  w.mutable_optimizer()->set_name("adamw");
  ApplyDefaults(&w, l);
  EXPECT_DOUBLE_EQ(w.optimizer().weight_decay(), 0.01);
}

TEST(SpecTest, AnOptionTheOptimiserDoesNotHaveIsRefused) {
  SpecLimits l;
  v1::ExperimentSpec s;
  s.mutable_optimizer()->set_name("sgd");
  s.mutable_optimizer()->set_rho(0.5);
  ApplyDefaults(&s, l);
  Status st = ValidateSpec(s, l);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("rho: does not apply to optimizer sgd"), std::string::npos)
      << st.message();
  v1::ExperimentSpec n;
  n.mutable_optimizer()->set_name("nesterov");
  n.mutable_optimizer()->set_momentum(0);
  ApplyDefaults(&n, l);
  EXPECT_EQ(ValidateSpec(n, l).message(), "momentum: nesterov needs momentum > 0 (got 0)");
  v1::ExperimentSpec d;  // the field at fault is named, with its value as typed
  d.mutable_optimizer()->set_name("nesterov");
  d.mutable_optimizer()->set_dampening(0.5);
  ApplyDefaults(&d, l);
  EXPECT_EQ(ValidateSpec(d, l).message(), "dampening: nesterov needs dampening 0 (got 0.5)");
}

TEST(SpecTest, ZeroMeansWhatTheReadmeSays) {
  SpecLimits l;
  v1::ExperimentSpec s;
  s.set_stall_timeout_ms(0);  // off
  s.set_step_timeout_ms(0);   // off
  s.set_eval_samples(0);      // no evaluation
  ApplyDefaults(&s, l);
  EXPECT_EQ(s.stall_timeout_ms(), 0u);
  EXPECT_EQ(s.step_timeout_ms(), 0u);
  EXPECT_EQ(s.eval_samples(), 0u);
  EXPECT_TRUE(ValidateSpec(s, l).ok());
}

TEST(SpecTest, EpochsReplaceTheDefaultBatches) {
  SpecLimits l;
  v1::ExperimentSpec s;
  s.set_epochs(2);
  s.set_epoch_samples(1000);
  s.set_workers(3);
  s.set_batch_size(64);
  ApplyDefaults(&s, l);
  EXPECT_FALSE(s.has_batches());
  EXPECT_TRUE(ValidateSpec(s, l).ok());
  EXPECT_EQ(BatchesPerEpoch(s, 60000), 6u);  // 333 samples a worker: 5 full batches and a short one
  EXPECT_EQ(StepsPerWorker(s, 60000), 12u);
  v1::ExperimentSpec b;
  b.set_epoch_samples(10);
  ApplyDefaults(&b, l);
  EXPECT_NE(ValidateSpec(b, l).message().find("epoch_samples: only with epochs"),
            std::string::npos);
}

// Once the set's size is known: an epoch larger than the set is refused with both sizes, not cut
// to the set; one too small to give every worker a batch is refused; a set without training
// images is refused.
TEST(SpecTest, TrainingSetChecksTheEpochAgainstTheSet) {
  SpecLimits l;
  v1::ExperimentSpec s;
  s.set_dataset("/data/fashion");
  s.set_epochs(1);
  s.set_epoch_samples(60001);
  s.set_workers(2);
  ApplyDefaults(&s, l);
  ASSERT_TRUE(ValidateSpec(s, l).ok());
  EXPECT_EQ(CheckTrainingSet(s, 60000).message(),
            "epoch_samples: 60001 is more than the 60000 training images of /data/fashion");
  s.set_epoch_samples(60000);
  EXPECT_TRUE(CheckTrainingSet(s, 60000).ok());
  s.set_epoch_samples(1);
  EXPECT_EQ(CheckTrainingSet(s, 60000).message(),
            "epoch_samples: an epoch of 1 samples over 2 workers leaves none to a worker");
  EXPECT_EQ(CheckTrainingSet(s, 0).message(), "dataset: it has no training images");
  v1::ExperimentSpec batches;  // no epochs: the set only needs images
  ApplyDefaults(&batches, l);
  EXPECT_TRUE(CheckTrainingSet(batches, 10).ok());
}

// multi_model's own defaults (the original's batch, seed and momentum; a worker per variant), no
// defaults for the fields it does not read, and those fields refused when given.
TEST(SpecTest, MultiModelDefaultsAndForeignFields) {
  SpecLimits l;
  l.cores = 2;
  v1::ExperimentSpec s;
  s.set_kind("multi_model");
  s.mutable_multi_model()->set_models(8);
  ApplyDefaults(&s, l);
  EXPECT_EQ(s.workers(), 3u);
  EXPECT_EQ(s.batch_size(), 32u);
  EXPECT_EQ(s.seed(), 114514u);
  EXPECT_EQ(s.multi_model().iterations(), 1000u);
  EXPECT_DOUBLE_EQ(s.optimizer().momentum(), 0.9);
  EXPECT_FALSE(s.has_dataset());
  EXPECT_FALSE(s.has_batches());
  EXPECT_FALSE(s.has_eval_samples());
  EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
  EXPECT_EQ(StepsPerWorker(s, 0), 1000u);
  v1::ExperimentSpec one;
  one.set_kind("multi_model");
  ApplyDefaults(&one, l);
  EXPECT_EQ(one.workers(), 2u);  // linear and conv1d
  v1::ExperimentSpec ds = one;
  ds.set_dataset("/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(ValidateSpec(ds, l).message(), "dataset: not a field of kind multi_model");
  v1::ExperimentSpec w;
  w.set_kind("multi_model");
  w.set_workers(3);
  ApplyDefaults(&w, l);
  EXPECT_NE(ValidateSpec(w, l).message().find("one worker per variant (2 for models 1)"),
            std::string::npos);
  v1::ExperimentSpec hog;
  hog.mutable_multi_model()->set_iterations(5);
  ApplyDefaults(&hog, l);
  EXPECT_EQ(ValidateSpec(hog, l).message(),
            "iterations: not a field of kind hogwild (it is multi_model's)");
  v1::ExperimentSpec big = one;
  big.mutable_multi_model()->set_models(300);
  big.set_workers(3);
  EXPECT_NE(ValidateSpec(big, l).message().find("models: 300 is outside"), std::string::npos);
}

// The CLI reference's option table quotes the field table: a default changed in one place shows
// here.
TEST(SpecTest, TheCliReferenceQuotesEveryFieldAndItsDefault) {
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/docs/cli-reference.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  ASSERT_FALSE(readme.empty());
  for (const auto& f : SpecFields()) {
    std::string flag = "--" + f.name;
    for (auto& c : flag)
      if (c == '_') c = '-';
    const std::string row = "| `" + flag + "` | " + SpecFieldDefault(f) + " |";
    EXPECT_NE(readme.find(row), std::string::npos) << "docs/cli-reference.md lacks: " << row;
  }
}

// With no --allocator, the planned step where the kind's trainer marks its steps on the CPU (a
// model file's included), cache elsewhere; the spec says why. A typed one is kept, as typed.
TEST(SpecTest, TheAllocatorDefaultIsPlannedWhereStepsAreMarked) {
  SpecLimits l;
  l.cores = 2;
  l.cuda_devices = 1;
  struct Case {
    std::string kind, device, model_file, want;
  };
  const Case cases[] = {{"hogwild", "cpu", "", "planned"},
                        {"data_parallel", "cpu", "", "planned"},
                        {"hogwild", "cpu", "sha256:" + std::string(64, 'a'), "planned"},
                        {"hogwild", "cuda", "", "cache"},
                        {"multi_model", "cpu", "", "cache"},
                        {"data_loading", "cpu", "", "cache"},
                        {"pipeline", "cpu", "", "cache"}};
  for (const auto& c : cases) {
    v1::ExperimentSpec s;
    s.set_kind(c.kind);
    s.set_device(c.device);
    if (!c.model_file.empty()) s.set_model_file(c.model_file);
    ApplyDefaults(&s, l);
    EXPECT_EQ(s.allocator(), c.want) << c.kind << " " << c.device;
    EXPECT_EQ(s.allocator_why().rfind("default", 0), 0u) << s.allocator_why();
    // A resolved spec travels to a node (a Slurm task's order): it passes the wire's checks.
    const Status wire = CheckSpecStrings(s);
    EXPECT_TRUE(wire.ok()) << wire.message();
  }
  v1::ExperimentSpec hogwild;
  ApplyDefaults(&hogwild, l);
  EXPECT_EQ(hogwild.allocator_why(), "default: hogwild marks its steps on the CPU");
  v1::ExperimentSpec typed;
  typed.set_allocator("cache");
  ApplyDefaults(&typed, l);
  ApplyDefaults(&typed, l);  // twice, as a sweep's point is: still the user's
  EXPECT_EQ(typed.allocator(), "cache");
  EXPECT_EQ(typed.allocator_why(), "");
  v1::ExperimentSpec command;
  command.set_kind("command");
  ApplyDefaults(&command, l);
  EXPECT_FALSE(command.has_allocator());
  EXPECT_EQ(command.allocator_why(), "");
}

// With no concurrent_steps, hogwild's workers step the cores' worth at once (cores / threads)
// where the planned allocator serves the CPU, so they share that many step arenas; every worker
// at once where the cores hold them all, or no arena would be shared (cache, CUDA). A typed one is
// kept, checked against the workers; the other kinds have no such field.
TEST(SpecTest, ConcurrentStepsDefaultToTheCoresWorthWhereArenasAreShared) {
  SpecLimits l;
  l.cores = 2;
  l.cuda_devices = 1;
  struct Case {
    uint32_t workers, threads;
    std::string device;
    uint32_t want;
  };
  const Case cases[] = {{1, 0, "cpu", 1}, {2, 0, "cpu", 2}, {4, 0, "cpu", 2}, {8, 0, "cpu", 2},
                        {4, 2, "cpu", 1}, {3, 4, "cpu", 1}, {2, 1, "cpu", 2}, {8, 0, "cuda", 8}};
  for (const auto& c : cases) {
    v1::ExperimentSpec s;
    s.set_workers(c.workers);
    if (c.threads > 0) s.set_threads(c.threads);
    s.set_device(c.device);
    if (c.device == "cuda") s.set_start("spawn");
    ApplyDefaults(&s, l);
    EXPECT_EQ(s.hogwild().concurrent_steps(), c.want)
        << c.workers << " x " << c.threads << " " << c.device;
    EXPECT_EQ(s.hogwild().concurrent_steps_why().rfind("default", 0), 0u)
        << s.hogwild().concurrent_steps_why();
    if (c.device == "cpu") {  // cuda: this test's daemon probed no GPU
      EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
    }
  }
  v1::ExperimentSpec eight;
  eight.set_workers(8);
  ApplyDefaults(&eight, l);
  EXPECT_EQ(eight.hogwild().concurrent_steps_why(),
            "default: the cores' worth (2 cores, 1 thread each)");
  EXPECT_TRUE(CheckSpecStrings(eight).ok()) << CheckSpecStrings(eight).message();
  v1::ExperimentSpec two;
  two.set_workers(2);
  ApplyDefaults(&two, l);
  EXPECT_EQ(two.hogwild().concurrent_steps_why(), "default: all at once, as the cores allow");
  v1::ExperimentSpec cached;  // no shared arenas: a turn would save nothing
  cached.set_workers(8);
  cached.set_allocator("cache");
  ApplyDefaults(&cached, l);
  EXPECT_EQ(cached.hogwild().concurrent_steps(), 8u);
  EXPECT_EQ(cached.hogwild().concurrent_steps_why(),
            "default: all at once (shared arenas need planned, on the CPU)");
  EXPECT_TRUE(CheckSpecStrings(cached).ok()) << CheckSpecStrings(cached).message();
  v1::ExperimentSpec typed;
  typed.set_workers(8);
  typed.mutable_hogwild()->set_concurrent_steps(8);
  ApplyDefaults(&typed, l);
  ApplyDefaults(&typed, l);  // twice, as a sweep's point is: still the user's
  EXPECT_EQ(typed.hogwild().concurrent_steps(), 8u);
  EXPECT_EQ(typed.hogwild().concurrent_steps_why(), "");
  EXPECT_TRUE(ValidateSpec(typed, l).ok());
  for (uint32_t bad : {0u, 9u}) {
    typed.mutable_hogwild()->set_concurrent_steps(bad);
    EXPECT_EQ(ValidateSpec(typed, l).message(), "concurrent_steps: " + std::to_string(bad) +
                                                    " is outside 1..8 (at most the 8 workers)");
  }
  for (const std::string kind : {"data_parallel", "multi_model", "data_loading", "pipeline"}) {
    v1::ExperimentSpec other;
    other.set_kind(kind);
    ApplyDefaults(&other, l);
    EXPECT_FALSE(other.hogwild().has_concurrent_steps()) << kind;
    EXPECT_EQ(other.hogwild().concurrent_steps_why(), "") << kind;
    other.mutable_hogwild()->set_concurrent_steps(1);
    EXPECT_EQ(ValidateSpec(other, l).message(),
              "concurrent_steps: not a field of kind " + kind + " (it is hogwild's)");
  }
}

// optimizer_in_backward: resolved to no when not given, so a record says how it stepped; yes is
// hogwild's on the CPU, and refused by name elsewhere.
TEST(SpecTest, TheOptimizerInTheBackwardPassIsHogwildsOnTheCpu) {
  SpecLimits l;
  v1::ExperimentSpec plain;
  ApplyDefaults(&plain, l);
  ASSERT_TRUE(plain.optimizer().has_in_backward());
  EXPECT_FALSE(plain.optimizer().in_backward());
  v1::ExperimentSpec yes;
  yes.mutable_optimizer()->set_name("adam");
  yes.mutable_optimizer()->set_in_backward(true);
  ApplyDefaults(&yes, l);
  EXPECT_TRUE(ValidateSpec(yes, l).ok()) << ValidateSpec(yes, l).message();
  yes.set_device("cuda");
  yes.set_start("spawn");
  EXPECT_EQ(ValidateSpec(yes, l).message(), "optimizer_in_backward: cpu only (not tried on cuda)");
  for (const std::string kind : {"data_parallel", "multi_model", "pipeline"}) {
    v1::ExperimentSpec other;
    other.set_kind(kind);
    other.mutable_optimizer()->set_in_backward(true);
    ApplyDefaults(&other, l);
    EXPECT_EQ(
        ValidateSpec(other, l).message(),
        "optimizer_in_backward: only hogwild steps its optimizer in the backward pass (kind " +
            kind + " does not)");
  }
}

// step_timeout_ms: a record says whether it was given (a model file's leader replaces only the
// default by its probe's bound).
TEST(SpecTest, AStepTimeoutSaysWhetherItWasGiven) {
  SpecLimits l;
  v1::ExperimentSpec plain;
  ApplyDefaults(&plain, l);
  EXPECT_EQ(plain.step_timeout_ms(), 1800000u);
  EXPECT_EQ(plain.step_timeout_why(), "the default");
  v1::ExperimentSpec given;
  given.set_step_timeout_ms(1800000);
  ApplyDefaults(&given, l);
  EXPECT_EQ(given.step_timeout_why(), "");
  // A spec from a client (one copied from a record, its timeout edited) says what was given: the
  // daemon's reasons are cleared at the edge before the defaults are applied.
  v1::ExperimentSpec copied = plain;
  copied.set_step_timeout_ms(0);
  ClearDaemonSetFields(&copied);
  ApplyDefaults(&copied, l);
  EXPECT_EQ(copied.step_timeout_ms(), 0u);
  EXPECT_EQ(copied.step_timeout_why(), "");
  EXPECT_EQ(copied.allocator_why(), "");  // its allocator came with it: given
  EXPECT_FALSE(plain.allocator_why().empty());
}

// A model file's measured options: recorded as contiguous and no when not given, checked by
// name, a model file's only; bfloat16 autocast only where the daemon found bfloat16 instructions.
TEST(SpecTest, AModelFilesMeasuredOptionsAreItsOwnAndCheckedByName) {
  SpecLimits l;
  l.bf16_missing = "its flags name neither avx512_bf16 nor amx_bf16";
  auto model_file = [] {
    v1::ExperimentSpec s;
    s.set_model_file("sha256:" + std::string(64, 'a'));
    s.set_input("float32[B,3,8,8]");
    s.set_classes(10);
    return s;
  };
  v1::ExperimentSpec plain = model_file();
  ApplyDefaults(&plain, l);
  EXPECT_EQ(plain.memory_format(), "contiguous");
  EXPECT_EQ(plain.autocast(), "no");
  EXPECT_TRUE(ValidateSpec(plain, l).ok()) << ValidateSpec(plain, l).message();
  v1::ExperimentSpec nhwc = model_file();
  nhwc.set_memory_format("channels_last");
  ApplyDefaults(&nhwc, l);
  EXPECT_TRUE(ValidateSpec(nhwc, l).ok()) << ValidateSpec(nhwc, l).message();
  nhwc.set_memory_format("nhwc");
  EXPECT_EQ(ValidateSpec(nhwc, l).message(),
            "memory_format: 'nhwc' is not one of: contiguous, channels_last");
  v1::ExperimentSpec bf16 = model_file();
  bf16.set_autocast("bfloat16");
  ApplyDefaults(&bf16, l);
  EXPECT_EQ(ValidateSpec(bf16, l).code(), Code::kFailedPrecondition);
  EXPECT_EQ(ValidateSpec(bf16, l).message(),
            "autocast: bfloat16 on this node's CPU is emulated, not run: its flags name neither "
            "avx512_bf16 nor amx_bf16");
  l.bf16_missing = "";
  EXPECT_TRUE(ValidateSpec(bf16, l).ok()) << ValidateSpec(bf16, l).message();
  bf16.set_autocast("float16");
  EXPECT_EQ(ValidateSpec(bf16, l).message(), "autocast: 'float16' is not one of: no, bfloat16");
  for (const char* field : {"memory_format", "autocast"}) {
    v1::ExperimentSpec builtin;
    ASSERT_TRUE(SetSpecField(&builtin, *FindSpecField(field),
                             std::string(field) == "autocast" ? "no" : "contiguous")
                    .ok());
    ApplyDefaults(&builtin, l);
    EXPECT_EQ(ValidateSpec(builtin, l).message(),
              std::string(field) + ": only with model_file (a model of your own)");
  }
}

// shoal-leader (no LibTorch) leads where the leader holds no model: hogwild and data_parallel
// with a built-in model under spawn or the forkserver (and unshared CUDA weights), and kind
// command always; shoal-worker where a model must be in the leader, each with its reason; a model
// file's shoal-worker leader hands off to shoal-leader where no worker inherits its model.
TEST(SpecTest, TheLeaderLoadsLibTorchOnlyWhereItHoldsAModel) {
  struct Case {
    std::string kind, start, device, model_file;
    bool share, libtorch;
    std::string why;
  };
  const std::string file = "sha256:" + std::string(64, 'a');
  const Case cases[] = {
      {"hogwild", "spawn", "cpu", "", true, false,
       "start spawn: worker 0 writes the initial weights"},
      {"hogwild", "forkserver", "cpu", "", true, false,
       "start forkserver: worker 0 writes the initial weights"},
      {"data_parallel", "spawn", "cpu", "", true, false,
       "start spawn: worker 0 writes the initial weights"},
      {"hogwild", "spawn", "cuda", "", false, false,
       "start spawn: worker 0 writes the initial weights"},
      {"command", "fork", "cpu", "", true, false, "the workers are the user's program"},
      {"hogwild", "fork", "cpu", "", true, true,
       "start fork: the workers inherit the leader's model"},
      {"data_parallel", "fork", "cpu", "", true, true,
       "start fork: the workers inherit the leader's model"},
      {"hogwild", "spawn", "cpu", file, true, true,
       "the leader loads and probes the model file, then execs shoal-leader: no worker inherits "
       "the model"},
      {"data_parallel", "forkserver", "cpu", file, false, true,
       "the leader loads and probes the model file, then execs shoal-leader: no worker inherits "
       "the model"},
      {"hogwild", "fork", "cpu", file, true, true,
       "start fork: the workers inherit the leader's model"},
      {"hogwild", "spawn", "cuda", "", true, true,
       "shared CUDA weights: the leader owns the device buffer"},
      {"multi_model", "spawn", "cpu", "", true, true, "multi_model builds its model in the leader"},
      {"pipeline", "spawn", "cpu", "", true, true, "pipeline builds its model in the leader"},
      {"data_loading", "spawn", "cpu", "", true, true,
       "data_loading builds its model in the leader"}};
  for (const auto& c : cases) {
    v1::ExperimentSpec s;
    s.set_kind(c.kind);
    s.set_start(c.start);
    s.set_device(c.device);
    s.set_share(c.share);
    if (!c.model_file.empty()) s.set_model_file(c.model_file);
    ApplyDefaults(&s, SpecLimits{});
    const LeaderChoice got = ChooseLeader(s);
    EXPECT_EQ(got.libtorch, c.libtorch) << c.kind << " " << c.start << " " << c.device;
    EXPECT_EQ(got.why, c.why);
    // Only a model file's leader under spawn or the forkserver hands off to shoal-leader.
    EXPECT_EQ(got.hands_off, !c.model_file.empty() && c.start != "fork")
        << c.kind << " " << c.start;
  }
}

// Whether `quoted` (SpecFieldDefault's words) names `kind` with `said` in its kinds' part:
// "64 (multi_model, data_parallel: 32; pipeline: 8)".
bool NamesKindWith(const std::string& quoted, const std::string& kind, const std::string& said) {
  const size_t open = quoted.rfind(" (");
  if (open == std::string::npos || quoted.back() != ')') return false;
  std::stringstream groups(quoted.substr(open + 2, quoted.size() - open - 3));
  for (std::string group; std::getline(groups, group, ';');) {
    if (group.rfind(' ', 0) == 0) group.erase(0, 1);
    const size_t colon = group.find(": ");
    if (colon == std::string::npos || group.substr(colon + 2) != said) continue;
    std::stringstream kinds(group.substr(0, colon));
    for (std::string k; std::getline(kinds, k, ',');)
      if (k == kind || k == " " + kind) return true;
  }
  return false;
}

// Each default a kind gets is in the words docs/cli-reference.md and --help quote: a kind whose
// default differs from hogwild's is named there with it, and a field only some kinds read quotes
// their default. The words come from the kinds (their defaults, applied; their default_words).
TEST(SpecTest, EveryKindsOwnDefaultIsQuoted) {
  SpecLimits l;
  l.cores = 2;
  for (const std::string& kind : KindNames()) {
    v1::ExperimentSpec spec;
    spec.set_kind(kind);
    ApplyDefaults(&spec, l);
    // Against hogwild with the same optimiser and workers: what follows from those (an
    // optimiser's own defaults, threads from workers) is quoted under them.
    v1::ExperimentSpec hogwild;
    if (!spec.optimizer().name().empty())
      hogwild.mutable_optimizer()->set_name(spec.optimizer().name());
    if (spec.has_workers()) hogwild.set_workers(spec.workers());
    ApplyDefaults(&hogwild, l);
    for (const auto& f : SpecFields()) {
      const std::string mine = SpecFieldText(spec, f), base = SpecFieldText(hogwild, f);
      if (f.name == "kind" || mine.empty() || mine == base) continue;
      const std::string quoted = SpecFieldDefault(f);
      const auto& words = FindKind(kind)->default_words;
      const std::string said = words.count(f.name) ? words.at(f.name) : mine;
      if (base.empty()) {
        EXPECT_NE(quoted.find(said), std::string::npos)
            << f.name << ": " << kind << "'s default " << said << " is not in '" << quoted << "'";
      } else {
        EXPECT_TRUE(NamesKindWith(quoted, kind, said))
            << f.name << ": " << kind << "'s default " << said << " (hogwild's " << base
            << ") is not named in '" << quoted << "'";
      }
    }
  }
}

// The generic words name no kind; each kind adds its own, grouped where they agree.
TEST(SpecTest, AFieldsDefaultAndHelpAreHogwildsThenEachKindsOwn) {
  auto words = [](const std::string& name) { return SpecFieldDefault(*FindSpecField(name)); };
  EXPECT_EQ(words("batch_size"), "64 (multi_model, data_parallel: 32; pipeline: 8)");
  EXPECT_EQ(words("seed"), "1 (multi_model: 114514)");
  EXPECT_EQ(words("workers"),
            "1 (multi_model: one per variant: 2 for models 1, else 3; data_loading: loaders + 1; "
            "pipeline: stages)");
  EXPECT_EQ(words("dampening"), "0");  // the same for every kind that reads it
  EXPECT_EQ(words("loaders"), "0");    // a kind's own field: its table's words
  const std::string help = SpecFieldHelp(*FindSpecField("batch_size"));
  EXPECT_EQ(help,
            "samples per batch (data_parallel: per worker with scaling weak, per step with "
            "strong)");
  const std::string model = SpecFieldHelp(*FindSpecField("model"));
  EXPECT_NE(model.find("mnist_convnet (hogwild, data_loading, data_parallel)"), std::string::npos)
      << model;
  EXPECT_NE(model.find("amoebanet_d (pipeline)"), std::string::npos) << model;
}

// Where each worker trains on CUDA is written into the spec: a pipeline spreads its stages over
// the devices the worker's LibTorch sees (torchgpipe's one partition a device); hogwild stays on
// device 0; a list given is kept; the CPU gets none.
TEST(SpecTest, CudaDevicesDefaultPerKindAndAreKeptWhenGiven) {
  SpecLimits l;
  l.cuda_missing = "";
  l.cuda_devices = 2;
  auto spec = [&](const std::string& kind, uint32_t stages, const std::string& device) {
    v1::ExperimentSpec s;
    s.set_kind(kind);
    s.set_device(device);
    s.set_start("spawn");
    if (kind == "pipeline") s.mutable_pipeline()->set_stages(stages);
    ApplyDefaults(&s, l);
    return s;
  };
  EXPECT_EQ(spec("pipeline", 3, "cuda").cuda_devices(), "0,1,0");
  EXPECT_EQ(spec("pipeline", 1, "cuda").cuda_devices(), "0");
  EXPECT_EQ(spec("hogwild", 1, "cuda").cuda_devices(), "0");
  EXPECT_FALSE(spec("pipeline", 3, "cpu").has_cuda_devices());
  const v1::ExperimentSpec p = spec("pipeline", 3, "cuda");
  EXPECT_TRUE(ValidateSpec(p, l).ok()) << ValidateSpec(p, l).message();
  EXPECT_EQ(CudaOrdinal(p, 1), 1u);
  EXPECT_EQ(CudaOrdinal(p, 2), 0u);
  EXPECT_EQ(CudaOrdinal(spec("pipeline", 3, "cpu"), 2), 0u);

  v1::ExperimentSpec given;
  given.set_kind("pipeline");
  given.set_device("cuda");
  given.mutable_pipeline()->set_stages(4);
  given.set_cuda_devices("1,1,0");
  ApplyDefaults(&given, l);
  EXPECT_EQ(given.cuda_devices(), "1,1,0");
  EXPECT_EQ(CudaOrdinal(given, 3), 1u);  // (i mod n)-th
  EXPECT_EQ(CudaOrdinal(given, 2), 0u);
}

TEST(SpecTest, CudaDevicesAreCheckedAgainstTheDevicesThereAre) {
  SpecLimits l;
  l.cuda_missing = "";
  l.cuda_devices = 2;
  auto why = [&](const std::string& device, const std::string& list, bool share) {
    v1::ExperimentSpec s;
    s.set_device(device);
    s.set_start("spawn");
    s.set_share(share);
    s.set_workers(2);
    s.set_cuda_devices(list);
    ApplyDefaults(&s, l);
    return ValidateSpec(s, l).message();
  };
  EXPECT_EQ(why("cuda", "0,1", false), "");
  EXPECT_EQ(why("cpu", "0", false), "cuda_devices: only with device cuda (device is cpu)");
  EXPECT_EQ(why("cuda", "0,,1", false),
            "cuda_devices: '0,,1' is not a comma-separated list of device ordinals");
  EXPECT_EQ(why("cuda", "1,2", false),
            "cuda_devices: device 2 in '1,2', but the worker's LibTorch sees 2 device(s) (0..1)");
  EXPECT_EQ(why("cuda", "64", false), "cuda_devices: device 64 is past ordinal 63");
  EXPECT_EQ(why("cuda", "1,1", true), "");
  EXPECT_NE(why("cuda", "0,1", true).find("cuda_devices: '0,1' names several devices, but shared"),
            std::string::npos);
  v1::ExperimentSpec mm;  // a kind that has no CUDA path does not read the field
  mm.set_kind("multi_model");
  mm.set_cuda_devices("0");
  ApplyDefaults(&mm, l);
  EXPECT_EQ(ValidateSpec(mm, l).message(), "cuda_devices: not a field of kind multi_model");
}

// cuda_sync: hogwild on cuda says in its record when its workers waited for the device
// (phases unless given); a CPU run has no such field, and a kind that does not read it refuses it.
TEST(SpecTest, CudaSyncDefaultsToPhasesOnCudaAndIsRefusedElsewhere) {
  SpecLimits l;
  l.cuda_missing = "";
  l.cuda_devices = 1;
  auto spec = [&](const std::string& kind, const std::string& device, const char* sync) {
    v1::ExperimentSpec s;
    s.set_kind(kind);
    s.set_device(device);
    s.set_start("spawn");
    if (sync != nullptr) s.set_cuda_sync(sync);
    ApplyDefaults(&s, l);
    return s;
  };
  auto why = [&](const v1::ExperimentSpec& s) { return ValidateSpec(s, l).message(); };
  EXPECT_EQ(spec("hogwild", "cuda", nullptr).cuda_sync(), "events");
  EXPECT_EQ(spec("hogwild", "cuda", "step").cuda_sync(), "step");
  EXPECT_EQ(why(spec("hogwild", "cuda", "step")), "");
  EXPECT_FALSE(spec("hogwild", "cpu", nullptr).has_cuda_sync());
  EXPECT_FALSE(spec("pipeline", "cuda", nullptr).has_cuda_sync());
  EXPECT_EQ(why(spec("hogwild", "cpu", "step")),
            "cuda_sync: only with device cuda (device is cpu)");
  EXPECT_NE(why(spec("hogwild", "cuda", "steps")).find("cuda_sync: 'steps'"), std::string::npos);
  EXPECT_EQ(why(spec("pipeline", "cuda", "step")), "cuda_sync: not a field of kind pipeline");
  EXPECT_EQ(why(spec("multi_model", "cpu", "step")), "cuda_sync: not a field of kind multi_model");
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

namespace shoal {
namespace {

// A kind's fields live in its own message: one kind's settings at a time, the other refused by
// the schema, naming whose field it is; the CLI's flat names map into the message.
TEST(SpecTest, AKindsFieldsLiveInItsMessageAndAnotherKindsAreRefused) {
  v1::ExperimentSpec s;
  s.set_kind("data_loading");
  ASSERT_TRUE(SetSpecField(&s, *FindSpecField("loaders"), "2").ok());
  EXPECT_EQ(s.data_loading().loaders(), 2u);
  EXPECT_EQ(FieldKind(*FindSpecField("loaders")), "data_loading");
  EXPECT_EQ(FieldKind(*FindSpecField("batch_size")), "");
  // A second kind's field would switch the oneof and drop the first: refused, nothing lost.
  const Status two = SetSpecField(&s, *FindSpecField("stages"), "2");
  EXPECT_EQ(two.message(),
            "stages: a field of kind pipeline, and the spec already holds kind data_loading's "
            "settings (an experiment is of one kind)");
  EXPECT_EQ(s.data_loading().loaders(), 2u);
  // Clearing another kind's field leaves this kind's settings alone.
  ClearSpecField(&s, *FindSpecField("stages"));
  EXPECT_TRUE(s.has_data_loading());
  // Given to hogwild: refused before any default is applied, naming the field and its kind.
  v1::ExperimentSpec h;
  ASSERT_TRUE(SetSpecField(&h, *FindSpecField("prefetch"), "4").ok());
  ApplyDefaults(&h, SpecLimits{});
  EXPECT_EQ(h.data_loading().prefetch(), 4u);  // kept as given, not replaced by hogwild's
  EXPECT_EQ(ValidateSpec(h, SpecLimits{}).message(),
            "prefetch: not a field of kind hogwild (it is data_loading's)");
  // Every kind's field is in the table once, under its kind's message.
  for (const KindRules& k : AllKinds())
    for (const SpecField& f : k.fields) {
      ASSERT_NE(FindSpecField(f.name), nullptr) << f.name;
      EXPECT_EQ(FieldKind(*FindSpecField(f.name)), k.name) << f.name;
    }
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// Fields by name as text (the Python package's keyword arguments) are set as the CLI's options
// are, with their refusals.
TEST(SpecFieldTextsTest, FieldsByNameAreSetAndRefusedAsTheCliSetsThem) {
  auto fields = [](std::vector<std::pair<std::string, std::string>> kv) {
    google::protobuf::RepeatedPtrField<v1::AxisValue> out;
    for (const auto& [k, v] : kv) {
      v1::AxisValue* a = out.Add();
      a->set_field(k);
      a->set_value(v);
    }
    return out;
  };
  v1::ExperimentSpec spec;
  ASSERT_TRUE(
      SetSpecFieldTexts(
          &spec,
          fields({{"workers", "4"}, {"batch-size", "32"}, {"start", "forkserver"}, {"lr", "0.05"}}))
          .ok());
  EXPECT_EQ(spec.workers(), 4u);
  EXPECT_EQ(spec.batch_size(), 32u);
  EXPECT_EQ(spec.start(), "forkserver");
  v1::ExperimentSpec other;
  EXPECT_EQ(SetSpecFieldTexts(&other, fields({{"wrokers", "4"}})).message().substr(0, 45),
            "'wrokers' is not a spec field (fields: kind, ");
  EXPECT_EQ(SetSpecFieldTexts(&other, fields({{"workers", "1"}, {"workers", "2"}})).message(),
            "workers: given 2 times; it takes one value");
  EXPECT_EQ(SetSpecFieldTexts(&spec, fields({{"workers", "2"}})).message(),
            "workers: given both in the spec and by name");
  v1::ExperimentSpec third;
  const Status bad = SetSpecFieldTexts(&third, fields({{"batch_size", "0x10"}}));
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("batch_size"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace shoal
