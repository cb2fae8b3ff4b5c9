#include "shared/idx.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
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

constexpr uint64_t kMaxIdxBytes = uint64_t(1) << 32;  // far above any MNIST-format set
constexpr uint64_t kMaxDeflateRatio = 1032;           // deflate cannot expand more than this

// An opened IDX file, read through zlib (which passes raw files through).
class OpenFile {
 public:
  OpenFile(int fd, uint64_t size, bool gzip) : fd_(fd), size_(size), gzip_(gzip) {
    gz_ = gzdopen(::dup(fd), "rb");
    if (gz_ != nullptr) gzbuffer(gz_, 1 << 17);
  }
  OpenFile(OpenFile&& o) noexcept : fd_(o.fd_), size_(o.size_), gzip_(o.gzip_), gz_(o.gz_) {
    o.fd_ = -1;
    o.gz_ = nullptr;
  }
  OpenFile(const OpenFile&) = delete;
  ~OpenFile() {
    if (gz_ != nullptr) gzclose(gz_);
    if (fd_ >= 0) ::close(fd_);
  }

  // Up to n bytes (fewer only at the end of the data).
  StatusOr<size_t> Read(uint8_t* dst, size_t n, const std::string& what) {
    if (gz_ == nullptr) return Internal(what + ": cannot start zlib");
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = unsigned(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(gz_, dst + done, chunk);
      if (got < 0) {
        int err = 0;
        return DataLoss(what + ": corrupt or truncated gzip data (" + gzerror(gz_, &err) + ")");
      }
      if (got == 0) break;
      done += size_t(got);
    }
    return done;
  }

  // Whether a file of this size can hold `bytes` of IDX data, before reading them.
  Status CheckSize(uint64_t bytes, const std::string& what) const {
    if (!gzip_) {
      if (bytes == size_) return Status::Ok();
      if (bytes < size_)
        return DataLoss(what + ": " + std::to_string(size_ - bytes) +
                        " unexpected bytes after the data");
      return DataLoss(what + ": truncated: the header promises " + std::to_string(bytes) +
                      " bytes, the file has " + std::to_string(size_));
    }
    uint8_t trailer[4];
    if (size_ < 18 || ::pread(fd_, trailer, 4, off_t(size_ - 4)) != 4)
      return DataLoss(what + ": truncated gzip file");
    const uint32_t isize = uint32_t(trailer[0]) | uint32_t(trailer[1]) << 8 |
                           uint32_t(trailer[2]) << 16 | uint32_t(trailer[3]) << 24;
    if (bytes > size_ * kMaxDeflateRatio) {
      return DataLoss(what + ": the header promises " + std::to_string(bytes) +
                      " bytes, more than this " + std::to_string(size_) +
                      "-byte gzip file can hold");
    }
    if (isize != uint32_t(bytes)) {
      return DataLoss(what + ": the header promises " + std::to_string(bytes) +
                      " bytes, the gzip trailer says " + std::to_string(isize) +
                      " (cut or corrupt file)");
    }
    return Status::Ok();
  }

 private:
  int fd_;
  uint64_t size_;
  bool gzip_;
  gzFile gz_ = nullptr;
};

// Opens `path` for reading; with `under` set, its real path must lie below that directory, and
// the resolved path is opened without following a symlink (one swapped in meanwhile fails).
StatusOr<OpenFile> OpenUnder(const std::string& path, const std::string& under) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return NotFound(path + ": " + std::strerror(errno));
  const std::string real = buf;
  if (!under.empty() && real.compare(0, under.size() + 1, under + "/") != 0) {
    return InvalidArgument(path + ": resolves to " + real + ", outside its data set directory " +
                           under);
  }
  const int fd = ::open(real.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return NotFound(path + ": " + std::strerror(errno));
  struct stat st;
  uint8_t magic[2] = {0, 0};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(path + ": not a regular file");
  }
  const bool gzip = ::pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  return OpenFile(fd, uint64_t(st.st_size), gzip);
}

// The header of an IDX image: dims into out, the body's size into *total, its own into *head.
Status ParseIdxHeader(const uint8_t* bytes, size_t size, const std::string& what, IdxArray* out,
                      uint64_t* total, size_t* head) {
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
  *head = 4 + 4 * ndim;
  if (size < *head) return DataLoss(what + ": truncated IDX header");
  *total = 1;
  for (uint32_t i = 0; i < ndim; ++i) {
    out->dims.push_back(BigEndian32(bytes + 4 + 4 * i));
    *total *= out->dims.back();
    if (*total > kMaxIdxBytes) return DataLoss(what + ": IDX dimensions are implausibly large");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<IdxArray> ParseIdx(const uint8_t* bytes, size_t size, const std::string& what) {
  IdxArray out;
  uint64_t total = 0;
  size_t head = 0;
  RETURN_IF_ERROR(ParseIdxHeader(bytes, size, what, &out, &total, &head));
  const size_t body = size - head;
  if (body < total) {
    return DataLoss(what + ": truncated: header promises " + std::to_string(total) +
                    " bytes of data, file has " + std::to_string(body));
  }
  if (body > total) {
    return DataLoss(what + ": " + std::to_string(body - total) +
                    " unexpected bytes after the data");
  }
  out.data.assign(bytes + head, bytes + size);
  return out;
}

namespace {

// An IDX file opened, its header parsed and checked against the file's size; the body next.
struct IdxStream {
  OpenFile file;
  IdxArray header;  // dims; data empty
  uint64_t total = 0;
};

StatusOr<IdxStream> OpenIdx(const std::string& path, const std::string& under) {
  ASSIGN_OR_RETURN(OpenFile f, OpenUnder(path, under));
  uint8_t head_bytes[4 + 4 * 4];
  ASSIGN_OR_RETURN(size_t got, f.Read(head_bytes, 4, path));
  const size_t rank = got == 4 ? head_bytes[3] : 0;
  if (got == 4 && rank >= 1 && rank <= 4) {
    ASSIGN_OR_RETURN(size_t more, f.Read(head_bytes + 4, 4 * rank, path));
    got += more;
  }
  IdxStream s{std::move(f), {}, 0};
  size_t head = 0;
  RETURN_IF_ERROR(ParseIdxHeader(head_bytes, got, path, &s.header, &s.total, &head));
  RETURN_IF_ERROR(s.file.CheckSize(head + s.total, path));
  return s;
}

// The body, exactly s.total bytes of it, into dst.
Status ReadIdxBody(IdxStream& s, uint8_t* dst, const std::string& path) {
  ASSIGN_OR_RETURN(size_t n, s.file.Read(dst, s.total, path));
  if (n < s.total) {
    return DataLoss(path + ": truncated: header promises " + std::to_string(s.total) +
                    " bytes of data, file has " + std::to_string(n));
  }
  uint8_t extra;
  ASSIGN_OR_RETURN(size_t after, s.file.Read(&extra, 1, path));
  if (after != 0) return DataLoss(path + ": unexpected bytes after the data");
  return Status::Ok();
}

}  // namespace

StatusOr<IdxArray> ReadIdxFile(const std::string& path, const std::string& under, bool body) {
  ASSIGN_OR_RETURN(IdxStream s, OpenIdx(path, under));
  IdxArray out = std::move(s.header);
  if (!body) return out;
  out.data.resize(s.total);
  RETURN_IF_ERROR(ReadIdxBody(s, out.data.data(), path));
  return out;
}

Status ReadIdxBodyInto(const std::string& path, const std::string& under,
                       const std::vector<uint32_t>& dims, uint8_t* dst) {
  ASSIGN_OR_RETURN(IdxStream s, OpenIdx(path, under));
  if (s.header.dims != dims) return DataLoss(path + ": changed since its header was read");
  return ReadIdxBody(s, dst, path);
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

namespace {

// Cross-checks an images/labels pair; `images` may hold only its header.
Status CheckPair(const IdxArray& images, const IdxArray& labels, const std::string& ip,
                 const std::string& lp) {
  if (images.dims.size() != 3) return DataLoss(ip + ": images must be a 3-d IDX array");
  if (labels.dims.size() != 1) return DataLoss(lp + ": labels must be a 1-d IDX array");
  if (images.dims[0] != labels.dims[0]) {
    return DataLoss(ip + " has " + std::to_string(images.dims[0]) + " images but " + lp + " has " +
                    std::to_string(labels.dims[0]) + " labels");
  }
  for (uint8_t l : labels.data) {
    if (l > 9) return DataLoss(lp + ": label " + std::to_string(l) + " outside 0..9");
  }
  if (images.dims[1] != 28 || images.dims[2] != 28) {
    return InvalidArgument(ip + ": images are " + std::to_string(images.dims[1]) + "x" +
                           std::to_string(images.dims[2]) +
                           ", the mnist_convnet model needs 28x28");
  }
  return Status::Ok();
}

// Reads (or, without bodies, checks) the directory into `s`.
Status ReadMnistDir(const std::string& dir, bool image_bodies, MnistSet* s) {
  ASSIGN_OR_RETURN(MnistFiles files, FindMnistFiles(dir));
  char real[PATH_MAX];
  if (::realpath(dir.c_str(), real) == nullptr) return NotFound(dir + ": " + std::strerror(errno));
  s->files = files;
  s->real_dir = real;
  auto pair = [&](const std::string& ip, const std::string& lp, IdxArray* images,
                  IdxArray* labels) -> Status {
    ASSIGN_OR_RETURN(*images, ReadIdxFile(ip, real, image_bodies));
    ASSIGN_OR_RETURN(*labels, ReadIdxFile(lp, real));
    return CheckPair(*images, *labels, ip, lp);
  };
  RETURN_IF_ERROR(pair(files.train_images, files.train_labels, &s->train_images, &s->train_labels));
  if (s->train_images.count() == 0) return InvalidArgument(files.train_images + ": no images");
  s->rows = s->train_images.dims[1];
  s->cols = s->train_images.dims[2];
  if (!files.test_images.empty())
    RETURN_IF_ERROR(pair(files.test_images, files.test_labels, &s->test_images, &s->test_labels));
  return Status::Ok();
}

}  // namespace

StatusOr<MnistSet> LoadMnistDir(const std::string& dir) {
  MnistSet s;
  RETURN_IF_ERROR(ReadMnistDir(dir, true, &s));
  return s;
}

StatusOr<MnistSet> ReadMnistHeaders(const std::string& dir) {
  MnistSet s;
  RETURN_IF_ERROR(ReadMnistDir(dir, false, &s));
  return s;
}

Status CheckMnistDir(const std::string& dir) { return ReadMnistHeaders(dir).status(); }

Status ReadMnistImagesInto(const MnistSet& s, uint8_t* train, uint8_t* test) {
  RETURN_IF_ERROR(ReadIdxBodyInto(s.files.train_images, s.real_dir, s.train_images.dims, train));
  if (s.files.test_images.empty()) return Status::Ok();
  return ReadIdxBodyInto(s.files.test_images, s.real_dir, s.test_images.dims, test);
}

}  // namespace shoal
