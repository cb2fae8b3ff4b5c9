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

// Reads an IDX file, gunzipping it when it starts with the gzip magic. Its header is checked
// against the file's size before any body is read (raw: exactly; gzip: the trailer's length and
// the most deflate can expand), and decompression stops at what the header promises. With
// `under` set (a real directory path), the file's real path must lie below it: a symlink out of
// a data set is refused, and the file is opened with O_NOFOLLOW on its resolved path. With
// `body` false only the header is read (dims set, data empty).
StatusOr<IdxArray> ReadIdxFile(const std::string& path, const std::string& under = "",
                               bool body = true);

// The four files of an MNIST-format directory. Test files are optional (empty when absent).
struct MnistFiles {
  std::string train_images, train_labels, test_images, test_labels;
};
StatusOr<MnistFiles> FindMnistFiles(const std::string& dir);

struct MnistSet {
  uint32_t rows = 0, cols = 0;
  IdxArray train_images, train_labels, test_images, test_labels;  // test_* may be empty
};
// Loads and cross-checks a directory: every file inside it (symlinks out refused), image/label
// counts agree, images 3-d and 28x28, labels 1-d and 0..9, at least one training image.
StatusOr<MnistSet> LoadMnistDir(const std::string& dir);
// The same checks without reading the image bodies (labels are read): what submit can afford.
Status CheckMnistDir(const std::string& dir);

}  // namespace shoal
