#include "server/blob_store.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "shared/spec/spec.h"

namespace shoal {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPartPrefix = ".part-";
constexpr size_t kMaxName = 255;

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// The base name of `name`, or "" when what is left is not a printable file name.
std::string BaseName(const std::string& name) {
  std::string base =
      name.substr(name.find_last_of('/') == std::string::npos ? 0 : name.find_last_of('/') + 1);
  if (base.empty() || base == "." || base == ".." || base.size() > kMaxName) return "";
  for (unsigned char c : base)
    if (c < 0x20 || c == 0x7f) return "";
  return base;
}

std::string RandomHex() {
  static thread_local std::mt19937_64 gen{std::random_device{}()};
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(gen()));
  return buf;
}

}  // namespace

struct BlobUpload::Hash {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  Hash() { EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr); }
  ~Hash() { EVP_MD_CTX_free(ctx); }
  std::string HexDigest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx, md, &len);
    std::string hex;
    char two[3];
    for (unsigned int i = 0; i < len; ++i) {
      std::snprintf(two, sizeof two, "%02x", md[i]);
      hex += two;
    }
    return hex;
  }
};

BlobUpload::BlobUpload(BlobStore* store, std::string name, uint64_t size, std::string part, int fd)
    : store_(store),
      name_(std::move(name)),
      part_(std::move(part)),
      size_(size),
      fd_(fd),
      hash_(std::make_unique<Hash>()) {}

BlobUpload::~BlobUpload() {
  if (fd_ >= 0) ::close(fd_);
  if (!part_.empty()) ::unlink(part_.c_str());
}

Status BlobUpload::Append(const std::string& bytes) {
  if (fd_ < 0) return FailedPrecondition("upload: already finished");
  if (bytes.size() > size_ - written_)
    return InvalidArgument("upload: more than the " + std::to_string(size_) +
                           " bytes the upload declared");
  for (size_t off = 0; off < bytes.size();) {
    const ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ResourceExhausted(Errno("upload: writing " + part_));
    off += size_t(n);
  }
  EVP_DigestUpdate(hash_->ctx, bytes.data(), bytes.size());
  written_ += bytes.size();
  return Status::Ok();
}

StatusOr<v1::StoredFile> BlobUpload::Commit() {
  if (fd_ < 0) return FailedPrecondition("upload: already finished");
  if (written_ != size_) {
    ::close(fd_);  // nothing of a short upload is kept
    fd_ = -1;
    ::unlink(part_.c_str());
    part_.clear();
    return InvalidArgument("upload: ended after " + std::to_string(written_) + " of the " +
                           std::to_string(size_) + " bytes it declared");
  }
  const int fd = fd_;
  fd_ = -1;
  std::string error = ::fsync(fd) == 0 ? "" : Errno("upload: " + part_);
  if (::close(fd) != 0 && error.empty()) error = Errno("upload: " + part_);
  if (!error.empty()) {  // the descriptor is closed either way; nothing of it is kept
    ::unlink(part_.c_str());
    part_.clear();
    return ResourceExhausted(error);
  }
  auto stored = store_->Store(part_, hash_->HexDigest(), name_);
  part_.clear();  // renamed into place, or removed by Store
  return stored;
}

Status BlobStore::Init() {
  if (dir_.empty()) return Status::Ok();
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Unavailable("blob directory " + dir_ + ": " + ec.message());
  ::chmod(dir_.c_str(), 0700);
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind(kPartPrefix, 0) == 0) {
      std::error_code rm;
      fs::remove(it->path(), rm);
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<BlobUpload>> BlobStore::Begin(const std::string& name, uint64_t size) {
  if (dir_.empty()) return Unavailable("upload: this daemon keeps no uploaded files");
  const std::string base = BaseName(name);
  if (base.empty())
    return InvalidArgument("upload: name '" + name.substr(0, 80) +
                           "' is not a file name (printable, at most 255 bytes)");
  if (size == 0) return InvalidArgument("upload: " + base + " is empty");
  if (size > max_bytes_)
    return ResourceExhausted("upload: " + base + " is " + std::to_string(size >> 20) +
                             " MiB; this shoald takes at most " + std::to_string(max_bytes_ >> 20) +
                             " MiB (shoald --max-upload-mb)");
  const std::string part = dir_ + "/" + kPartPrefix + RandomHex();
  const int fd = ::open(part.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Unavailable(Errno("upload: " + part));
  return std::unique_ptr<BlobUpload>(new BlobUpload(this, base, size, part, fd));
}

StatusOr<v1::StoredFile> BlobStore::Store(const std::string& part, const std::string& hex,
                                          const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string path = dir_ + "/" + hex;
  if (::access(path.c_str(), F_OK) == 0) {
    ::unlink(part.c_str());
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // in use again: the grace starts anew
  } else {
    std::ofstream(path + ".name") << name;
    if (::rename(part.c_str(), path.c_str()) != 0) {
      const Status st = Unavailable(Errno("upload: storing " + path));
      ::unlink(part.c_str());
      ::unlink((path + ".name").c_str());
      return st;
    }
  }
  StatusOr<v1::StoredFile> f = Find("sha256:" + hex);  // its first name, if it had one
  if (f.ok() && f->name().empty()) f->set_name(name);
  return f;
}

StatusOr<v1::StoredFile> BlobStore::Find(const std::string& ref) const {
  if (!IsSha256Ref(ref)) return InvalidArgument("'" + ref.substr(0, 80) + "' is not sha256:<hex>");
  const std::string path = dir_ + "/" + ref.substr(7);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return NotFound("model_file: " + ref +
                    " is not stored on this daemon (upload it: the CLI's "
                    "--model-file PATH does)");
  v1::StoredFile f;
  f.set_ref(ref);
  f.set_size_bytes(uint64_t(st.st_size));
  std::ifstream in(path + ".name");
  std::string name;
  std::getline(in, name);
  f.set_name(name);
  return f;
}

size_t BlobStore::RemoveUnreferenced(const std::set<std::string>& in_use,
                                     std::chrono::seconds grace) {
  if (dir_.empty()) return 0;
  std::lock_guard<std::mutex> l(mu_);
  const auto cut = fs::file_time_type::clock::now() - grace;
  size_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string hex = it->path().filename().string();
    if (!IsSha256Ref("sha256:" + hex) || in_use.count("sha256:" + hex) > 0) continue;
    std::error_code te;
    if (fs::last_write_time(it->path(), te) > cut || te) continue;
    std::error_code rm;
    fs::remove(it->path(), rm);
    fs::remove(it->path().string() + ".name", rm);
    ++removed;
  }
  return removed;
}

}  // namespace shoal
