#include "worker/tensor_file.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/unpickler.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "worker/models/scripted_model.h"

namespace shoal {
namespace {

// A read-only private mapping of a whole file, unmapped when the last tensor viewing it goes.
class Mapping {
 public:
  static StatusOr<std::shared_ptr<Mapping>> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Unavailable("dataset: cannot open " + path + ": " + std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      return FailedPrecondition("dataset: the file is empty");
    }
    void* at = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);  // the mapping holds the file
    if (at == MAP_FAILED) return Unavailable(std::string("dataset: mmap: ") + std::strerror(errno));
    return std::shared_ptr<Mapping>(new Mapping(static_cast<const char*>(at), size_t(st.st_size)));
  }
  ~Mapping() { ::munmap(const_cast<char*>(data_), size_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Mapping(const char* data, size_t size) : data_(data), size_(size) {}
  const char* data_;
  size_t size_;
};

uint16_t Le16(const char* p) { return uint16_t(uint8_t(p[0]) | uint16_t(uint8_t(p[1])) << 8); }

uint32_t Le32(const char* p) { return uint32_t(Le16(p)) | uint32_t(Le16(p + 2)) << 16; }
uint64_t Le64(const char* p) { return uint64_t(Le32(p)) | uint64_t(Le32(p + 4)) << 32; }

// What a zip record's local header says: its compression method (-1: no header found) and its
// size (UINT64_MAX: not in the header).
struct RecordHeader {
  int method = -1;
  uint64_t size = UINT64_MAX;
};

// The size in a zip64 extra field (id 1: the uncompressed size first), if the area holds one.
uint64_t Zip64Size(const char* extra, size_t len) {
  for (size_t at = 0; at + 4 <= len;) {
    const size_t id = Le16(extra + at), n = Le16(extra + at + 2);
    if (id == 1 && n >= 8 && at + 4 + 8 <= len) return Le64(extra + at + 4);
    at += 4 + n;
  }
  return UINT64_MAX;
}

// The local header of the zip record whose data starts at `data` and whose name ends with
// `suffix`. torch.save pads each record's extra field so that its data is 64-byte aligned: the
// header lies at most 64 KiB and a name before the data. Every read stays below `data`.
RecordHeader HeaderOf(const Mapping& m, size_t data, const std::string& suffix) {
  constexpr size_t kHeader = 30;  // the local header's fixed part
  const size_t lowest = data > kHeader + 0xffff + 4096 ? data - kHeader - 0xffff - 4096 : 0;
  for (size_t h = data >= kHeader + suffix.size() ? data - kHeader - suffix.size() + 1 : 0;
       h-- > lowest;) {
    const char* p = m.data() + h;
    if (p[0] != 'P' || std::memcmp(p, "PK\x03\x04", 4) != 0) continue;
    const size_t name = Le16(p + 26), extra = Le16(p + 28);
    if (h + kHeader + name + extra != data || name < suffix.size()) continue;
    if (std::memcmp(p + kHeader + name - suffix.size(), suffix.data(), suffix.size()) != 0)
      continue;
    RecordHeader r;
    r.method = Le16(p + 8);
    const bool described_after = (Le16(p + 6) & 0x8) != 0;  // sizes in a data descriptor
    const uint32_t size = Le32(p + 22);
    if (!described_after)
      r.size = size == 0xffffffffu ? Zip64Size(p + kHeader + name, extra) : size;
    return r;
  }
  return {};
}

// A mapped storage's deleter: how ReleaseFilePages knows a tensor views a mapped file.
void DropMappingRef(void* ctx) { delete static_cast<std::shared_ptr<Mapping>*>(ctx); }

// The storage of record `key`: the mapping at its offset, checked stored (not compressed); its
// size, where the header gives one, into `sizes` by its address.
at::DataPtr RecordInPlace(const std::shared_ptr<Mapping>& m,
                          caffe2::serialize::PyTorchStreamReader& reader, const std::string& key,
                          std::map<const char*, uint64_t>* sizes) {
  const std::string name = "data/" + key;
  const size_t offset = reader.getRecordOffset(name);
  TORCH_CHECK(offset < m->size(), "record ", name, " starts past the file's end");
  const RecordHeader h = HeaderOf(*m, offset, name);
  TORCH_CHECK(h.method == 0, "record ", name,
              " is compressed (torch.save stores tensors uncompressed: save the file again)");
  (*sizes)[m->data() + offset] = std::min<uint64_t>(h.size, m->size() - offset);
  return at::DataPtr(const_cast<char*>(m->data() + offset), new std::shared_ptr<Mapping>(m),
                     &DropMappingRef, at::kCPU);
}

}  // namespace

void ReleaseFilePages(const torch::Tensor& t) {
  // Only a mapped file's pages: on anonymous memory MADV_DONTNEED would zero the data.
  if (!t.is_contiguous() || t.nbytes() == 0 ||
      t.storage().data_ptr().get_deleter() != &DropMappingRef)
    return;
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(t.data_ptr());
  const uintptr_t lo = (start + page - 1) / page * page, hi = (start + t.nbytes()) / page * page;
  // MADV_DONTNEED on a private read-only file mapping drops this process's mapping of the pages;
  // their contents stay the file's.
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

StatusOr<torch::IValue> MapTensorFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<Mapping> m, Mapping::Open(path));
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    auto [pickle, pickle_size] = reader.getRecord("data.pkl");
    size_t at = 0;
    const char* bytes = static_cast<const char*>(pickle.get());
    auto read = [&](char* buf, size_t n) -> size_t {
      n = std::min(n, pickle_size - at);
      std::memcpy(buf, bytes + at, n);
      at += n;
      return n;
    };
    std::map<const char*, uint64_t> sizes;  // each record's bytes, by where its data starts
    torch::jit::Unpickler unpickler(
        read, nullptr, nullptr,
        [&](const std::string& key) { return RecordInPlace(m, reader, key, &sizes); }, at::kCPU);
    unpickler.set_version(reader.version());
    torch::IValue value = unpickler.parse_ivalue();
    // A storage larger than its record would read the next records (or past the file's end, a
    // SIGBUS): refused here instead.
    std::vector<torch::IValue> todo = {value};
    while (!todo.empty()) {
      torch::IValue v = todo.back();
      todo.pop_back();
      if (v.isTensor()) {
        const torch::Tensor& t = v.toTensor();
        const auto* start = static_cast<const char*>(t.storage().data());
        const auto record = sizes.find(start);
        if (t.storage().nbytes() > 0 &&
            (record == sizes.end() || t.storage().nbytes() > record->second))
          return FailedPrecondition("dataset: a tensor's storage is larger than its record");
      } else if (v.isGenericDict()) {
        for (const auto& kv : v.toGenericDict()) todo.push_back(kv.value());
      } else if (v.isList()) {
        for (const auto& x : v.toListRef()) todo.push_back(x);
      } else if (v.isTuple()) {
        for (const auto& x : v.toTupleRef().elements()) todo.push_back(x);
      }
    }
    return value;
  } catch (const std::exception& e) {
    return FailedPrecondition("dataset: LibTorch cannot read it: " + TorchMessage(e, 300));
  }
}

}  // namespace shoal
