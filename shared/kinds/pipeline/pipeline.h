// pipeline's arithmetic (seed 004), free of LibTorch so shoald and the worker share it: how the
// AmoebaNet-D layers split into stages, what crosses each stage boundary per micro-batch, and
// which micro-batches are checkpointed.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shared/gpu/cuda_ipc.h"
#include "shared/kinds/pipeline/amoebanet.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

constexpr uint32_t kPipelineSide = 224;      // ImageNet-sized input (the 7x7 pool needs 224..447)
constexpr uint32_t kPipelineClasses = 1000;  // as the seed

// "16,8" -> {16, 8}: `stages` positive counts summing to `layers` (AmoebaNet's L + 6). Empty text:
// as even as can be, the first stages one layer longer. INVALID_ARGUMENT naming balance otherwise.
StatusOr<std::vector<uint32_t>> ParseBalance(const std::string& text, uint32_t stages,
                                             uint32_t layers);
// Stage s's layers, [begin, end).
std::pair<uint32_t, uint32_t> StageLayers(const std::vector<uint32_t>& balance, uint32_t stage);

// The shapes of the tensors that leave layer `layer` for a micro-batch of `batch` images: one
// after the stem, two (the cell's output and the skip it passes on) after a cell, the logits
// after the classifier.
std::vector<std::vector<int64_t>> AmoebaStatesAfter(const std::vector<AmoebaLayer>& plan,
                                                    uint32_t layer, uint32_t batch);
uint64_t StatesBytes(const std::vector<std::vector<int64_t>>& shapes);  // float32

// A micro-batch's states as one ring message: a uint32 count, then per tensor a header (uint32
// ndim, uint32 reserved, int64 dims[4]) and its float32 data.
constexpr uint64_t kTensorHeaderBytes = 40;
// The slot a boundary after layer `last_layer` needs for a micro-batch of `micro_batch` images.
uint64_t PipelineSlotBytes(const std::vector<AmoebaLayer>& plan, uint32_t last_layer,
                           uint32_t micro_batch);

// The "rings" segment: first a page of CudaExports, one per ring (CUDA stages: the device buffer
// holding that ring's slots' data, exported by the stage that writes the ring); then, for each
// stage boundary b (stage b to b + 1), the forward ring (b's outputs, one slot per micro-batch) at
// index 2b and the backward ring (their gradients) at 2b + 1.
struct PipelineRing {
  uint64_t offset = 0, bytes = 0, slot_bytes = 0;
  uint32_t slots = 0;
};
struct PipelineLayout {
  std::vector<AmoebaLayer> plan;
  std::vector<uint32_t> balance;
  std::vector<PipelineRing> rings;
  uint64_t total_bytes = 0;  // 0: one stage, no segment
};
// Ring `ring`'s export in a rings segment mapped at `base`.
CudaExport* RingExport(void* base, uint32_t ring);
// The plan, balance and rings of a pipeline spec (defaults applied); INVALID_ARGUMENT as Validate.
StatusOr<PipelineLayout> PlanPipeline(const v1::ExperimentSpec& spec);

// Whether micro-batch `chunk` of `chunks` is recomputed in backward under `mode`.
bool Checkpointed(const std::string& mode, uint32_t chunk, uint32_t chunks);

// A pipeline spec's AmoebaNet plan (its layers and filters, 1000 classes).
StatusOr<std::vector<AmoebaLayer>> PipelinePlan(const v1::ExperimentSpec& spec);

}  // namespace shoal
