// Any bytes as a weights segment another process wrote: ReadWeights never reads outside the
// segment (ASan watches the copy it is given, exactly as long as the input), and whatever it
// accepts lies inside it, aligned, and writes back to the same table.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "shared/ipc/layout.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy, 16-byte aligned as a mapped segment is page aligned.
  std::vector<uint64_t> words((size + 7) / 8);
  std::memcpy(words.data(), data, size);
  auto plan = shoal::ReadWeights(words.data(), size);
  if (!plan.ok()) return 0;
  for (const auto& w : plan->tensors) {
    if (w.offset % shoal::kAlign != 0 || w.offset < plan->table_bytes ||
        w.offset + w.bytes() > plan->total_bytes || plan->total_bytes > size)
      std::abort();
  }
  // What was accepted plans to the same table: a writer and a reader agree.
  std::vector<shoal::TensorShape> shapes;
  for (const auto& w : plan->tensors) shapes.push_back(w.t);
  auto again = shoal::PlanWeights(shapes);
  if (!again.ok() || again->table_bytes != plan->table_bytes) std::abort();
  return 0;
}
