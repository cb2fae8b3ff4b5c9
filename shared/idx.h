// Reader for MNIST-format IDX files (gzipped or raw). Only unsigned-byte payloads are accepted:
// every MNIST-format data set stores images and labels that way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
  uint64_t count() const { return dims.empty() ? 0 : dims[0]; }
};

// Parses an IDX image held in memory; `what` names it in errors.
StatusOr<IdxArray> ParseIdx(const uint8_t* bytes, size_t size, const std::string& what);

// Reads a file, gunzipping it when it starts with the gzip magic.
StatusOr<std::vector<uint8_t>> ReadMaybeGzipped(const std::string& path);
StatusOr<IdxArray> ReadIdxFile(const std::string& path);

// The four files of an MNIST-format directory. Test files are optional (empty when absent).
struct MnistFiles {
  std::string train_images, train_labels, test_images, test_labels;
};
StatusOr<MnistFiles> FindMnistFiles(const std::string& dir);

struct MnistSet {
  uint32_t rows = 0, cols = 0;
  IdxArray train_images, train_labels, test_images, test_labels;  // test_* may be empty
};
// Loads and cross-checks a directory (image/label counts agree, images are 3-d, labels 1-d).
StatusOr<MnistSet> LoadMnistDir(const std::string& dir);

}  // namespace shoal
