#include "shared/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

namespace shoal {
namespace {

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

bool IsFile(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

StatusOr<IdxArray> ParseIdx(const uint8_t* bytes, size_t size, const std::string& what) {
  if (size < 4)
    return DataLoss(what + ": truncated IDX header (" + std::to_string(size) + " bytes)");
  if (bytes[0] != 0 || bytes[1] != 0) return DataLoss(what + ": not an IDX file (bad magic)");
  if (bytes[2] != 0x08) {
    return InvalidArgument(what + ": IDX element type 0x" + std::to_string(bytes[2]) +
                           " is not supported (only unsigned byte, 0x08)");
  }
  const uint32_t ndim = bytes[3];
  if (ndim == 0 || ndim > 4) {
    return DataLoss(what + ": IDX rank " + std::to_string(ndim) + " out of range 1..4");
  }
  if (size < 4 + 4 * ndim) return DataLoss(what + ": truncated IDX header");
  IdxArray out;
  uint64_t total = 1;
  for (uint32_t i = 0; i < ndim; ++i) {
    out.dims.push_back(BigEndian32(bytes + 4 + 4 * i));
    total *= out.dims.back();
    if (total > (uint64_t(1) << 34))
      return DataLoss(what + ": IDX dimensions are implausibly large");
  }
  const size_t body = size - 4 - 4 * ndim;
  if (body < total) {
    return DataLoss(what + ": truncated: header promises " + std::to_string(total) +
                    " bytes of data, file has " + std::to_string(body));
  }
  if (body > total) {
    return DataLoss(what + ": " + std::to_string(body - total) +
                    " unexpected bytes after the data");
  }
  out.data.assign(bytes + 4 + 4 * ndim, bytes + size);
  return out;
}

StatusOr<std::vector<uint8_t>> ReadMaybeGzipped(const std::string& path) {
  // gzread reads raw files transparently, and reports a cut-off gzip stream as an error.
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return NotFound(path + ": " + std::strerror(errno));
  gzbuffer(f, 1 << 17);
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int err = 0;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      return DataLoss(path + ": corrupt or truncated gzip data (" + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  int err = 0;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END) {
    std::string m = msg;
    gzclose(f);
    return DataLoss(path + ": corrupt or truncated gzip data (" + m + ")");
  }
  gzclose(f);
  return out;
}

StatusOr<IdxArray> ReadIdxFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadMaybeGzipped(path));
  return ParseIdx(bytes.data(), bytes.size(), path);
}

StatusOr<MnistFiles> FindMnistFiles(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument(
        "dataset: '" + dir +
        "' is not a directory (want a directory of MNIST IDX files, or 'synthetic')");
  }
  auto find = [&](const std::string& stem, const std::string& kind) -> std::string {
    // The names the MNIST-format sets ship with: train-images-idx3-ubyte(.gz) and
    // train-images.idx3-ubyte.
    for (const char* sep : {"-", "."}) {
      for (const char* ext : {"", ".gz"}) {
        std::string p = dir + "/" + stem + sep + kind + ext;
        if (IsFile(p)) return p;
      }
    }
    return "";
  };
  MnistFiles f;
  f.train_images = find("train-images", "idx3-ubyte");
  f.train_labels = find("train-labels", "idx1-ubyte");
  f.test_images = find("t10k-images", "idx3-ubyte");
  f.test_labels = find("t10k-labels", "idx1-ubyte");
  if (f.train_images.empty() || f.train_labels.empty()) {
    return InvalidArgument(
        "dataset: '" + dir +
        "' has no train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz]");
  }
  if (f.test_images.empty() != f.test_labels.empty()) {
    return InvalidArgument("dataset: '" + dir + "' has only one of the t10k images/labels files");
  }
  return f;
}

StatusOr<MnistSet> LoadMnistDir(const std::string& dir) {
  ASSIGN_OR_RETURN(MnistFiles files, FindMnistFiles(dir));
  MnistSet s;
  auto load_pair = [&](const std::string& ip, const std::string& lp, IdxArray& images,
                       IdxArray& labels) -> Status {
    ASSIGN_OR_RETURN(images, ReadIdxFile(ip));
    ASSIGN_OR_RETURN(labels, ReadIdxFile(lp));
    if (images.dims.size() != 3) return DataLoss(ip + ": images must be a 3-d IDX array");
    if (labels.dims.size() != 1) return DataLoss(lp + ": labels must be a 1-d IDX array");
    if (images.dims[0] != labels.dims[0]) {
      return DataLoss(ip + " has " + std::to_string(images.dims[0]) + " images but " + lp +
                      " has " + std::to_string(labels.dims[0]) + " labels");
    }
    for (uint8_t l : labels.data) {
      if (l > 9) return DataLoss(lp + ": label " + std::to_string(l) + " outside 0..9");
    }
    return Status::Ok();
  };
  RETURN_IF_ERROR(
      load_pair(files.train_images, files.train_labels, s.train_images, s.train_labels));
  s.rows = s.train_images.dims[1];
  s.cols = s.train_images.dims[2];
  if (s.rows != 28 || s.cols != 28) {
    return InvalidArgument(files.train_images + ": images are " + std::to_string(s.rows) + "x" +
                           std::to_string(s.cols) + ", the mnist_convnet model needs 28x28");
  }
  if (!files.test_images.empty()) {
    RETURN_IF_ERROR(load_pair(files.test_images, files.test_labels, s.test_images, s.test_labels));
    if (s.test_images.dims[1] != s.rows || s.test_images.dims[2] != s.cols) {
      return DataLoss(files.test_images + ": test images differ in size from the training images");
    }
  }
  return s;
}

}  // namespace shoal
