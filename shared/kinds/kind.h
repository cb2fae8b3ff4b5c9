// The daemon's half of an experiment kind: what shoald (which never loads LibTorch) must know of
// it to validate, admit and report. The worker's half (prepare, run a worker) is worker/kind.h.
// Adding a kind: its files under shared/kinds/ and worker/kinds/, and one line in each registry
// (shared/kinds/registry.cc, worker/kinds/registry.cc).
#pragma once

#include <string>
#include <vector>

#include "shared/admission.h"
#include "shared/spec.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct KindRules {
  std::string name;
  std::string summary;              // one line for --help and docs/cli.md
  std::vector<std::string> models;  // the models it can train
  // Checks beyond the common fields (the spec has its defaults); nullptr: none.
  Status (*validate)(const v1::ExperimentSpec&, const SpecLimits&) = nullptr;
  // What the experiment will put in /dev/shm and memory, for admission.
  StatusOr<ExperimentEstimate> (*estimate)(const v1::ExperimentSpec&) = nullptr;
  // The kind's own defaults, applied before the common ones; nullptr: none.
  void (*defaults)(v1::ExperimentSpec*, const SpecLimits&) = nullptr;
  // Fields of the table this kind does not read: refused when given, never defaulted.
  std::vector<std::string> foreign_fields;
  // The devices its worker half can train on.
  std::vector<std::string> devices = {"cpu"};
  // Whether its trainer marks each step for --allocator planned (worker/planned_allocator.h).
  bool marks_steps = false;
  // With device cuda and no cuda_devices: worker i on device i mod the devices there are (a
  // pipeline's stages, as torchgpipe places partitions), rather than all on device 0.
  bool spreads_over_devices = false;
};

// multi_model's variants for n models, in worker order: linear, conv1d (n = 1); mlinear, mconv1d,
// gconv1d (n > 1).
std::vector<std::string> MultiModelVariants(uint32_t models);

// data_loading's ring: max(1, loaders) x prefetch slots, each a whole batch; 0 bytes with no
// loaders (the trainer makes its batches itself).
uint32_t DataLoadingRingSlots(const v1::ExperimentSpec& spec);
uint64_t DataLoadingRingBytes(const v1::ExperimentSpec& spec);

// Every registered kind, in registration order.
const std::vector<KindRules>& AllKinds();
const KindRules* FindKind(const std::string& name);
std::vector<std::string> KindNames();

}  // namespace shoal
