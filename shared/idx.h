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
// ReadIdxFile's body straight into `dst` (dims' product bytes), with every check of a whole read;
// DataLoss when the file's dims are no longer `dims`.
Status ReadIdxBodyInto(const std::string& path, const std::string& under,
                       const std::vector<uint32_t>& dims, uint8_t* dst);

// The four files of an MNIST-format directory. Test files are optional (empty when absent).
struct MnistFiles {
  std::string train_images, train_labels, test_images, test_labels;
};
StatusOr<MnistFiles> FindMnistFiles(const std::string& dir);

struct MnistSet {
  uint32_t rows = 0, cols = 0;
  IdxArray train_images, train_labels, test_images, test_labels;  // test_* may be empty
  MnistFiles files;                                               // where they were read from
  std::string real_dir;  // the directory, resolved: every file lies below it
};
// Loads and cross-checks a directory: every file inside it (symlinks out refused), image/label
// counts agree, images 3-d and 28x28, labels 1-d and 0..9, at least one training image.
StatusOr<MnistSet> LoadMnistDir(const std::string& dir);
// The same checks without reading the image bodies (labels are read): what submit can afford.
Status CheckMnistDir(const std::string& dir);
// CheckMnistDir's set: image dims, labels, files; images' data empty.
StatusOr<MnistSet> ReadMnistHeaders(const std::string& dir);
// The image bodies of a ReadMnistHeaders set straight into place (test: when it has a test set):
// no second copy of the data set in memory.
Status ReadMnistImagesInto(const MnistSet& s, uint8_t* train, uint8_t* test);

}  // namespace shoal
