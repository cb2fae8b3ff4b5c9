#include "shared/os/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/statvfs.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cstring>

namespace bip = boost::interprocess;

namespace shoal {

std::string SegmentName(const std::string& experiment_id, const std::string& what) {
  return "shoal." + experiment_id + "." + what;
}
std::string SegmentPrefix(const std::string& experiment_id) {
  return "shoal." + experiment_id + ".";
}

ShmSegment::ShmSegment() = default;
ShmSegment::ShmSegment(ShmSegment&&) noexcept = default;
ShmSegment& ShmSegment::operator=(ShmSegment&&) noexcept = default;
ShmSegment::~ShmSegment() = default;

void* ShmSegment::data() const { return region_ ? region_->get_address() : nullptr; }
size_t ShmSegment::size() const { return region_ ? region_->get_size() : 0; }
void ShmSegment::Unmap() { region_.reset(); }

StatusOr<ShmSegment> ShmSegment::Create(const std::string& name, size_t bytes, ShmReserve reserve) {
  try {
    bip::shared_memory_object obj(bip::create_only, name.c_str(), bip::read_write,
                                  bip::permissions(0600));
    try {
      obj.truncate(static_cast<bip::offset_t>(bytes));
      // ftruncate reserves nothing on tmpfs: without this a full /dev/shm kills whoever first
      // touches a page past its room (SIGBUS), where the caller should get this error.
      const int rc = reserve == ShmReserve::kAll
                         ? ::posix_fallocate(obj.get_mapping_handle().handle, 0, off_t(bytes))
                         : 0;
      if (rc != 0) {
        throw bip::interprocess_exception(
            ("no room in /dev/shm: " + std::string(std::strerror(rc))).c_str());
      }
      ShmSegment s;
      s.name_ = name;
      s.region_ = std::make_unique<bip::mapped_region>(obj, bip::read_write);
      return s;
    } catch (const bip::interprocess_exception& e) {
      bip::shared_memory_object::remove(name.c_str());
      return ResourceExhausted("shared memory segment " + name + " (" + std::to_string(bytes) +
                               " bytes): " + e.what());
    }
  } catch (const bip::interprocess_exception& e) {
    return Internal("cannot create shared memory segment " + name + ": " + e.what());
  }
}

StatusOr<ShmSegment> ShmSegment::Open(const std::string& name, bool writable) {
  try {
    bip::shared_memory_object obj(bip::open_only, name.c_str(),
                                  writable ? bip::read_write : bip::read_only);
    ShmSegment s;
    s.name_ = name;
    s.region_ =
        std::make_unique<bip::mapped_region>(obj, writable ? bip::read_write : bip::read_only);
    return s;
  } catch (const bip::interprocess_exception& e) {
    return NotFound("cannot open shared memory segment " + name + ": " + e.what());
  }
}

bool ShmSegment::Remove(const std::string& name) {
  return bip::shared_memory_object::remove(name.c_str());
}

std::vector<std::string> ListSegments(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) out.emplace_back(e->d_name);
  }
  ::closedir(d);
  return out;
}

int RemoveSegments(const std::string& prefix) {
  int n = 0;
  for (const auto& name : ListSegments(prefix)) n += ShmSegment::Remove(name) ? 1 : 0;
  return n;
}

std::optional<ShmSpace> ReadShmSpace() {
  struct statvfs vfs;
  if (::statvfs("/dev/shm", &vfs) != 0) return std::nullopt;
  return ShmSpace{uint64_t(vfs.f_bavail) * vfs.f_frsize, uint64_t(vfs.f_blocks) * vfs.f_frsize};
}

}  // namespace shoal
