#include "shared/ipc/layout.h"

#include <cstdio>
#include <cstring>

namespace shoal {

StatusOr<WeightsHeader> PlanWeights(const std::vector<TensorShape>& tensors) {
  if (tensors.size() > kMaxTensors) {
    return InvalidArgument("model has " + std::to_string(tensors.size()) + " tensors, at most " +
                           std::to_string(kMaxTensors) + " fit the weight segment header");
  }
  WeightsHeader h;
  std::memset(&h, 0, sizeof h);
  h.magic = kWeightsMagic;
  h.version = kLayoutVersion;
  h.count = static_cast<uint32_t>(tensors.size());
  uint64_t off = AlignUp(sizeof(WeightsHeader));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    TensorEntry& e = h.entries[i];
    if (t.name.size() >= sizeof e.name) return InvalidArgument("tensor name too long: " + t.name);
    if (t.shape.size() > kMaxRank) return InvalidArgument("tensor rank too high: " + t.name);
    std::memcpy(e.name, t.name.c_str(), t.name.size() + 1);
    e.ndim = static_cast<uint32_t>(t.shape.size());
    uint64_t numel = 1;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] <= 0) return InvalidArgument("tensor " + t.name + " has an empty dimension");
      e.shape[d] = t.shape[d];
      numel *= static_cast<uint64_t>(t.shape[d]);
    }
    e.numel = numel;
    e.offset = off;
    off = AlignUp(off + numel * sizeof(float));
  }
  h.total_bytes = off;
  return h;
}

Status ValidateWeights(const WeightsHeader& h, size_t segment_bytes) {
  if (segment_bytes < sizeof(WeightsHeader))
    return DataLoss("weight segment smaller than its header");
  if (h.magic != kWeightsMagic) return DataLoss("weight segment: bad magic");
  if (h.version != kLayoutVersion) return DataLoss("weight segment: layout version mismatch");
  if (h.count > kMaxTensors || h.total_bytes > segment_bytes) {
    return DataLoss("weight segment: header out of bounds");
  }
  for (uint32_t i = 0; i < h.count; ++i) {
    const TensorEntry& e = h.entries[i];
    if (e.offset % kAlign != 0 || e.offset + e.numel * sizeof(float) > h.total_bytes) {
      return DataLoss("weight segment: tensor " + std::to_string(i) + " out of bounds");
    }
  }
  return Status::Ok();
}

DataHeader PlanData(uint64_t n_train, uint64_t n_test, uint32_t rows, uint32_t cols,
                    uint32_t channels) {
  DataHeader h;
  std::memset(&h, 0, sizeof h);
  h.magic = kDataMagic;
  h.version = kLayoutVersion;
  h.rows = rows;
  h.cols = cols;
  h.channels = channels;
  h.n_train = n_train;
  h.n_test = n_test;
  const uint64_t px = ImageBytes(h);
  uint64_t off = AlignUp(sizeof(DataHeader));
  h.train_images = off;
  off = AlignUp(off + n_train * px);
  h.train_labels = off;
  off = AlignUp(off + n_train);
  h.test_images = off;
  off = AlignUp(off + n_test * px);
  h.test_labels = off;
  off = AlignUp(off + n_test);
  h.total_bytes = off;
  return h;
}

Status ValidateData(const DataHeader& h, size_t segment_bytes) {
  if (segment_bytes < sizeof(DataHeader) || h.magic != kDataMagic || h.version != kLayoutVersion) {
    return DataLoss("data segment: bad header");
  }
  DataHeader want = PlanData(h.n_train, h.n_test, h.rows, h.cols, h.channels);
  if (std::memcmp(&want, &h, sizeof h) != 0 || h.total_bytes > segment_bytes) {
    return DataLoss("data segment: layout does not match its header");
  }
  return Status::Ok();
}

float BitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

double BitsToDouble(uint64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}
uint64_t DoubleToBits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

uint64_t Fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace shoal
