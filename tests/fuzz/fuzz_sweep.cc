// Any bytes as a SweepSpec: the wire checks and grid expansion never crash, never exceed the
// point limit, and every point they make is valid or says why it cannot run.
#include <cstdlib>

#include "shared/spec/spec.h"
#include "shared/spec/sweep.h"
#include "shared/spec/wire_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shoal::v1::SweepSpec sweep;
  if (!sweep.ParseFromArray(data, int(size))) return 0;
  if (!shoal::CheckSweepStrings(sweep).ok()) return 0;
  shoal::SpecLimits limits;
  limits.cores = 2;
  auto grid = shoal::ExpandGrid(sweep, limits);
  if (!grid.ok()) return 0;
  if (grid->size() > shoal::kMaxSweepPoints) std::abort();
  for (const auto& g : *grid) {
    if (g.point.note().empty() && !shoal::ValidateSpec(g.spec, limits).ok()) std::abort();
  }
  return 0;
}
