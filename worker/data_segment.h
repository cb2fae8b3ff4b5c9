// The experiment's data set and weights as bytes in shared segments, with no LibTorch: what the
// LibTorch-free leader (shoal-leader) and shoal-worker's kinds both use.
#pragma once

#include <cstdint>
#include <string>

#include "shared/ipc/layout.h"
#include "shared/os/shm.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// FNV-1a over the parameters' bytes, tensor by tensor in the table's order (ParamsChecksum's);
// the buffers that follow them are left out.
uint64_t SegmentChecksum(const WeightsPlan& plan, const void* base);

// A read-only view of the data set segment.
struct DataView {
  const DataHeader* header = nullptr;
  const uint8_t* base = nullptr;
  const uint8_t* train_images() const { return base + header->train_images; }
  const uint8_t* train_labels() const { return base + header->train_labels; }
  const uint8_t* test_images() const { return base + header->test_images; }
  const uint8_t* test_labels() const { return base + header->test_labels; }
};

// Loads the data set the spec names ("synthetic" or an MNIST IDX directory) into a new segment.
StatusOr<ShmSegment> LoadDataSegment(const v1::ExperimentSpec& spec, const std::string& name);

// Writes a learnable synthetic MNIST-shaped set (class-dependent blobs plus noise).
void FillSynthetic(uint64_t n_train, uint64_t n_test, uint64_t seed, const DataHeader& h,
                   uint8_t* base);

}  // namespace shoal
