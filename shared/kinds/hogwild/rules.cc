// hogwild (seed 000): N workers train one network on shared (or private) weights.
#include "shared/kinds/hogwild/figures.h"
#include "shared/kinds/kind.h"

namespace shoal {
namespace {

// After the common defaults: the turns share the planned allocator's arenas, one per turn.
void LateDefaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (s->hogwild().has_concurrent_steps()) return;
  std::string why;
  const uint32_t steps = DefaultConcurrentSteps(*s, limits, &why);
  s->mutable_hogwild()->set_concurrent_steps(steps);
  s->mutable_hogwild()->set_concurrent_steps_why(why);
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits&) {
  const uint32_t steps = s.hogwild().concurrent_steps();
  if (steps < 1 || steps > s.workers())
    return InvalidArgument("concurrent_steps: " + std::to_string(steps) + " is outside 1.." +
                           std::to_string(s.workers()) + " (at most the " +
                           std::to_string(s.workers()) + " workers)");
  return Status::Ok();
}

}  // namespace

KindRules HogwildRules() {
  KindRules k;
  k.name = "hogwild";
  k.references = {
      {"concurrent_steps",
       "hogwild: at most this many workers inside a training step at once; the others wait their "
       "turn between steps, first come first served. Fewer than the workers: the planned "
       "allocator's step arenas are shared, this many for all the workers (docs/allocators.md). "
       "1 .. workers"},
  };
  k.devices = {"cpu", "cuda"};
  k.marks_steps = true;
  k.steps_in_backward = true;
  k.leader_without_libtorch = true;
  k.summary = "N workers train one network Hogwild-style on shared (or private) weights";
  k.models = {"mnist_convnet", "torchscript"};
  k.estimate = EstimateExperiment;
  k.ignores = {"nodes", "node_rank", "master"};  // its workers share one node's memory
  k.fields = {{"concurrent_steps", "hogwild.concurrent_steps",
               "hogwild: at most this many workers inside a step at once, the others waiting "
               "their turn; fewer than the workers: that many step arenas, shared",
               "cores / threads where fewer than the workers, with planned on the CPU; else the "
               "workers",
               true, "allocator"}};  // beside the allocator, whose arenas the turns share
  k.late_defaults = LateDefaults;
  k.setting_lines = hogwild::SettingLines;
  k.report_note = hogwild::ReportNote;
  k.memory_shared_by_workers = hogwild::TookTurns;
  k.validate = Validate;
  return k;
}

}  // namespace shoal
