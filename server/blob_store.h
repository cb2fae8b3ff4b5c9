// Files users upload (a model, for now), stored under the sha256 of their content in one
// directory of the daemon's state: <dir>/<hex> with <hex>.name beside it (the name it was first
// uploaded under, a label). An upload is written to a partial file and renamed into place only
// when every declared byte has arrived, so an interrupted upload leaves nothing; shoald never
// parses what it stores (only worker processes open a model). Files no record refers to are
// removed with the records (rm, prune).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

class BlobStore;

// One upload in progress. Destroyed before Commit, it removes what it wrote.
class BlobUpload {
 public:
  ~BlobUpload();
  // INVALID_ARGUMENT once more bytes arrive than the upload declared.
  Status Append(const std::string& bytes);
  // The stored file; INVALID_ARGUMENT when fewer bytes arrived than declared.
  StatusOr<v1::StoredFile> Commit();

 private:
  friend class BlobStore;
  BlobUpload(BlobStore* store, std::string name, uint64_t size, std::string part, int fd);
  BlobStore* store_;
  std::string name_, part_;
  uint64_t size_, written_ = 0;
  int fd_;
  struct Hash;
  std::unique_ptr<Hash> hash_;
};

class BlobStore {
 public:
  // `max_bytes`: the largest file taken (shoald --max-upload-mb).
  BlobStore(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  // Makes the directory (0700) and removes partial files a stopped daemon left.
  Status Init();
  // An upload of `size` bytes named `name` (its base name is kept); RESOURCE_EXHAUSTED past the
  // limit, INVALID_ARGUMENT for a name that is not a plain file name.
  StatusOr<std::unique_ptr<BlobUpload>> Begin(const std::string& name, uint64_t size);
  // The stored file `ref` names ("sha256:<hex>"); NOT_FOUND when this daemon has none.
  StatusOr<v1::StoredFile> Find(const std::string& ref) const;
  // Removes the stored files no ref in `in_use` names and not uploaded or reused in the last
  // `grace` (a file uploaded for a submit that has not arrived yet stays); returns how many.
  size_t RemoveUnreferenced(const std::set<std::string>& in_use, std::chrono::seconds grace);
  const std::string& dir() const { return dir_; }
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  friend class BlobUpload;
  StatusOr<v1::StoredFile> Store(const std::string& part, const std::string& hex,
                                 const std::string& name);
  std::string dir_;
  uint64_t max_bytes_;
  std::mutex mu_;  // a commit against a removal of the same file
};

}  // namespace shoal
