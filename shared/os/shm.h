// POSIX shared-memory segments through Boost.Interprocess. Every segment of an experiment is named
// shoal.<experiment-id>.<what>, so the daemon can find and remove whatever an experiment left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"

namespace boost::interprocess {
class mapped_region;
}

namespace shoal {

std::string SegmentName(const std::string& experiment_id, const std::string& what);
std::string SegmentPrefix(const std::string& experiment_id);  // "shoal.<id>."

// kAll: every page is reserved in /dev/shm when the segment is made, so a full /dev/shm is an
// error then, not a SIGBUS later. kSparse: only the pages touched take room, for a segment most
// of whose pages never are (a CUDA pipeline's ring slots, whose data lives on the GPU).
enum class ShmReserve { kAll, kSparse };

// A mapped segment. Creating fails if the name exists: a stale segment is never reused silently.
class ShmSegment {
 public:
  static StatusOr<ShmSegment> Create(const std::string& name, size_t bytes,
                                     ShmReserve reserve = ShmReserve::kAll);
  static StatusOr<ShmSegment> Open(const std::string& name, bool writable);
  static bool Remove(const std::string& name);

  ShmSegment();
  ShmSegment(ShmSegment&&) noexcept;
  ShmSegment& operator=(ShmSegment&&) noexcept;
  ~ShmSegment();  // unmaps; never removes the name

  void* data() const;
  size_t size() const;
  const std::string& name() const { return name_; }
  void Unmap();

 private:
  std::string name_;
  std::unique_ptr<boost::interprocess::mapped_region> region_;
};

// Names (not paths) of the segments in /dev/shm that start with `prefix`.
std::vector<std::string> ListSegments(const std::string& prefix);
// Removes them; returns how many were removed.
int RemoveSegments(const std::string& prefix);

// /dev/shm's free space and size, or nullopt when it cannot be read.
struct ShmSpace {
  uint64_t free_bytes = 0, total_bytes = 0;
};
std::optional<ShmSpace> ReadShmSpace();

}  // namespace shoal
