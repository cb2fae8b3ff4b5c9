#include "shared/ipc/layout.h"

#include <cstdio>
#include <cstring>

namespace shoal {

size_t DtypeBytes(WeightDtype d) {
  static constexpr size_t kBytes[kWeightDtypes] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 1};
  const auto i = static_cast<uint32_t>(d);
  return i < kWeightDtypes ? kBytes[i] : 0;
}

const char* DtypeName(WeightDtype d) {
  static constexpr const char* kNames[kWeightDtypes] = {"float32", "float16", "bfloat16", "float64",
                                                        "int64",   "int32",   "int16",    "int8",
                                                        "uint8",   "bool"};
  const auto i = static_cast<uint32_t>(d);
  return i < kWeightDtypes ? kNames[i] : "unknown";
}

size_t WeightsPlan::parameters() const {
  size_t n = 0;
  while (n < tensors.size() && tensors[n].t.role == WeightRole::kParameter) ++n;
  return n;
}

namespace {

constexpr uint64_t kMaxSegmentBytes = uint64_t(1) << 62;  // past any machine; no overflow below

// Where the table's parts start: entries after the header, dims after the entries, names after
// the dims; the first tensor after the names, aligned.
struct TableParts {
  uint64_t entries, dims, names, end;
};
TableParts Parts(uint64_t count, uint64_t dims_count, uint64_t names_bytes) {
  TableParts p;
  p.entries = AlignUp(sizeof(WeightsHeader));
  p.dims = p.entries + count * sizeof(TensorEntry);
  p.names = p.dims + dims_count * sizeof(int64_t);
  p.end = AlignUp(p.names + names_bytes);
  return p;
}

// What the tensors' dims and names take of the table (its dims and names areas).
struct Areas {
  uint64_t dims = 0, names = 0;
};
Areas AreasOf(const std::vector<WeightTensor>& tensors) {
  Areas a;
  for (const auto& w : tensors) {
    a.dims += w.t.shape.size();
    a.names += w.t.name.size();
  }
  return a;
}

// numel of `shape`; false past kMaxSegmentBytes or for a negative dimension.
bool Numel(const std::vector<int64_t>& shape, uint64_t* numel) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d > 0 && n > kMaxSegmentBytes / uint64_t(d)) return false;
    n *= uint64_t(d);
  }
  *numel = n;
  return true;
}

}  // namespace

StatusOr<WeightsPlan> PlanWeights(const std::vector<TensorShape>& tensors) {
  WeightsPlan plan;
  for (const auto& t : tensors) plan.tensors.push_back({t, 0, 0});
  const Areas a = AreasOf(plan.tensors);
  plan.table_bytes = Parts(tensors.size(), a.dims, a.names).end;
  uint64_t off = plan.table_bytes;
  for (WeightTensor& w : plan.tensors) {
    const TensorShape& t = w.t;
    if (DtypeBytes(t.dtype) == 0) return InvalidArgument("tensor " + t.name + ": unknown dtype");
    if (t.channels_last && t.shape.size() != 4)
      return InvalidArgument("tensor " + t.name + ": channels_last needs rank 4");
    if (!Numel(t.shape, &w.numel) || w.numel > (kMaxSegmentBytes - off) / DtypeBytes(t.dtype))
      return InvalidArgument("tensor " + t.name + " has a negative or impossible shape");
    w.offset = off;
    off = AlignUp(off + w.bytes());
  }
  plan.total_bytes = off;
  return plan;
}

void WriteWeightsTable(const WeightsPlan& plan, void* base) {
  const Areas a = AreasOf(plan.tensors);
  const TableParts parts = Parts(plan.tensors.size(), a.dims, a.names);
  char* b = static_cast<char*>(base);
  auto* h = reinterpret_cast<WeightsHeader*>(b);
  std::memset(h, 0, sizeof *h);
  h->magic = kWeightsMagic;
  h->version = kLayoutVersion;
  h->count = static_cast<uint32_t>(plan.tensors.size());
  h->total_bytes = plan.total_bytes;
  h->initial_checksum = plan.initial_checksum;
  h->table_bytes = plan.table_bytes;
  h->dims_count = a.dims;
  h->names_bytes = a.names;
  auto* entries = reinterpret_cast<TensorEntry*>(b + parts.entries);
  auto* dim = reinterpret_cast<int64_t*>(b + parts.dims);
  uint64_t d = 0, n = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const WeightTensor& w = plan.tensors[i];
    entries[i] = TensorEntry{w.offset,
                             w.numel,
                             d,
                             n,
                             static_cast<uint32_t>(w.t.shape.size()),
                             static_cast<uint32_t>(w.t.dtype),
                             static_cast<uint32_t>(w.t.role),
                             static_cast<uint32_t>(w.t.name.size()),
                             w.t.channels_last ? 1u : 0u,
                             0};
    for (int64_t x : w.t.shape) dim[d++] = x;
    std::memcpy(b + parts.names + n, w.t.name.data(), w.t.name.size());
    n += w.t.name.size();
  }
}

namespace {

// One entry of a mapped table, checked against the table's areas and the segment.
// `e` is a copy: the mapped table may change under a reader that checks, then uses, a field.
Status ReadEntry(const char* b, const WeightsHeader& h, const TableParts& parts,
                 const TensorEntry e, WeightTensor* w) {
  if (e.dtype >= kWeightDtypes || e.role > uint32_t(WeightRole::kBuffer) || e.channels_last > 1 ||
      (e.channels_last == 1 && e.ndim != 4) || e.dims_at > h.dims_count ||
      e.ndim > h.dims_count - e.dims_at || e.name_at > h.names_bytes ||
      e.name_len > h.names_bytes - e.name_at)
    return DataLoss("entry out of its table");
  w->t.dtype = static_cast<WeightDtype>(e.dtype);
  w->t.role = static_cast<WeightRole>(e.role);
  w->t.channels_last = e.channels_last == 1;
  w->t.name.assign(b + parts.names + e.name_at, e.name_len);
  const auto* dims = reinterpret_cast<const int64_t*>(b + parts.dims) + e.dims_at;
  w->t.shape.assign(dims, dims + e.ndim);
  if (!Numel(w->t.shape, &w->numel) || w->numel != e.numel) return DataLoss("bad shape");
  w->offset = e.offset;
  // numel against the room left, divided: numel * element size may wrap past 2^64.
  if (e.offset % kAlign != 0 || e.offset < h.table_bytes || e.offset > h.total_bytes ||
      w->numel > (h.total_bytes - e.offset) / DtypeBytes(w->t.dtype))
    return DataLoss("bytes out of the segment");
  return Status::Ok();
}

}  // namespace

StatusOr<WeightsPlan> ReadWeights(const void* base, size_t segment_bytes) {
  if (segment_bytes < sizeof(WeightsHeader))
    return DataLoss("weight segment smaller than its header");
  const char* b = static_cast<const char*>(base);
  WeightsHeader h;
  std::memcpy(&h, b, sizeof h);
  if (h.magic != kWeightsMagic) return DataLoss("weight segment: bad magic");
  if (h.version != kLayoutVersion) return DataLoss("weight segment: layout version mismatch");
  // Each area is bounded by the segment before it is multiplied out: no overflow below.
  if (h.total_bytes > segment_bytes || h.count > segment_bytes / sizeof(TensorEntry) ||
      h.dims_count > segment_bytes / sizeof(int64_t) || h.names_bytes > segment_bytes ||
      Parts(h.count, h.dims_count, h.names_bytes).end != h.table_bytes ||
      h.table_bytes > h.total_bytes)
    return DataLoss("weight segment: header out of bounds");
  const TableParts parts = Parts(h.count, h.dims_count, h.names_bytes);
  WeightsPlan plan;
  plan.table_bytes = h.table_bytes;
  plan.total_bytes = h.total_bytes;
  plan.initial_checksum = h.initial_checksum;
  plan.tensors.resize(h.count);
  const auto* entries = reinterpret_cast<const TensorEntry*>(b + parts.entries);
  for (uint32_t i = 0; i < h.count; ++i) {
    Status st = ReadEntry(b, h, parts, entries[i], &plan.tensors[i]);
    if (!st.ok())
      return DataLoss("weight segment: tensor " + std::to_string(i) + ": " + st.message());
  }
  // The table WriteWeightsTable writes, exactly: no area larger than its entries use.
  const Areas a = AreasOf(plan.tensors);
  if (a.dims != h.dims_count || a.names != h.names_bytes)
    return DataLoss("weight segment: the table's areas are not its entries'");
  return plan;
}

DataHeader PlanData(uint64_t n_train, uint64_t n_test, uint32_t rows, uint32_t cols,
                    uint32_t channels) {
  DataHeader h;
  std::memset(&h, 0, sizeof h);
  h.magic = kDataMagic;
  h.version = kLayoutVersion;
  h.rows = rows;
  h.cols = cols;
  h.channels = channels;
  h.n_train = n_train;
  h.n_test = n_test;
  const uint64_t px = ImageBytes(h);
  uint64_t off = AlignUp(sizeof(DataHeader));
  h.train_images = off;
  off = AlignUp(off + n_train * px);
  h.train_labels = off;
  off = AlignUp(off + n_train);
  h.test_images = off;
  off = AlignUp(off + n_test * px);
  h.test_labels = off;
  off = AlignUp(off + n_test);
  h.total_bytes = off;
  return h;
}

Status ValidateData(const DataHeader& h, size_t segment_bytes) {
  if (segment_bytes < sizeof(DataHeader) || h.magic != kDataMagic || h.version != kLayoutVersion) {
    return DataLoss("data segment: bad header");
  }
  DataHeader want = PlanData(h.n_train, h.n_test, h.rows, h.cols, h.channels);
  if (std::memcmp(&want, &h, sizeof h) != 0 || h.total_bytes > segment_bytes) {
    return DataLoss("data segment: layout does not match its header");
  }
  return Status::Ok();
}

float BitsToFloat(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t FloatToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

double BitsToDouble(uint64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}
uint64_t DoubleToBits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

uint64_t Fnv1a(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace shoal
