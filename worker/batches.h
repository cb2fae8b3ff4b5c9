// Batches from the data segment (normalised as the study's MNIST recipe does, on the CPU or on the
// device the training set was uploaded to) and test-set accuracy over them.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "shared/ipc/layout.h"
#include "worker/data_segment.h"
#include "worker/models/models.h"

namespace shoal {

// Builds a normalised float batch [B,channels,side,side] and int64 labels from the given rows;
// `pixels`: bytes per image, every channel.
void MakeBatch(const uint8_t* images, const uint8_t* labels, const int64_t* idx, int64_t n,
               int64_t pixels, torch::Tensor* x, torch::Tensor* y, int64_t channels = 1);

// The training set on a device: uint8 images [n, pixels] and int64 labels, uploaded once per
// worker (each worker's own copy: one copy shared through IPC would save device memory, but each
// PyTorch process of the study holds its own, and that is what is measured).
struct DeviceData {
  torch::Tensor images, labels;
  int64_t channels = 1;
};
DeviceData UploadTrainSet(const DataView& data, const torch::Device& device);
// MakeBatch's batch, made on the device the data lives on.
void MakeDeviceBatch(const DeviceData& d, const int64_t* idx, int64_t n, torch::Tensor* x,
                     torch::Tensor* y);

// Test-set accuracy of the model on the first `limit` test images (batches moved to `device`);
// each batch marks `progress` (MarkProgress) when given.
double Evaluate(Model& model, const DataView& data, uint64_t limit, int64_t batch,
                const torch::Device& device = torch::kCPU, WorkerSlot* progress = nullptr);

}  // namespace shoal
