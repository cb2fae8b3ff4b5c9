// Any bytes as an ExperimentSpec: the wire checks, defaults and validation never crash, and a
// spec that passes them keeps passing (defaults are idempotent).
#include <cstdlib>

#include "shared/spec/spec.h"
#include "shared/spec/wire_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shoal::v1::ExperimentSpec spec;
  if (!spec.ParseFromArray(data, int(size))) return 0;
  if (!shoal::CheckSpecStrings(spec).ok()) return 0;
  shoal::SpecLimits limits;
  limits.cores = 2;
  shoal::ApplyDefaults(&spec, limits);
  if (!shoal::ValidateSpec(spec, limits).ok()) return 0;
  shoal::v1::ExperimentSpec again = spec;
  shoal::ApplyDefaults(&again, limits);
  if (again.SerializeAsString() != spec.SerializeAsString()) std::abort();
  (void)shoal::StepsPerWorker(spec, 60000);
  auto round = shoal::SpecFromJson(shoal::SpecToJson(spec));
  if (!round.ok() || !shoal::ValidateSpec(*round, limits).ok()) std::abort();
  return 0;
}
