// hogwild (seed 000): N workers train one network on shared (or private) weights.
#include "shared/kinds/kind.h"

namespace shoal {

KindRules HogwildRules() {
  KindRules k;
  k.name = "hogwild";
  k.devices = {"cpu", "cuda"};
  k.marks_steps = true;
  k.leader_without_libtorch = true;
  k.summary = "N workers train one network Hogwild-style on shared (or private) weights";
  k.models = {"mnist_convnet", "torchscript"};
  k.estimate = EstimateExperiment;
  k.foreign_fields = {"models", "iterations", "loaders", "prefetch",     "pin_memory", "scaling",
                      "nodes",  "node_rank",  "master",  "node_daemons", "layers",     "filters",
                      "stages", "balance",    "chunks",  "checkpoint"};
  return k;
}

}  // namespace shoal
