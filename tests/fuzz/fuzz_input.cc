// Any text as a model file's --input: the parser never crashes, every size it accepts is within
// its bounds, and what it accepts reads back the same from its own spelling (InputText).
#include <cstdlib>
#include <string>

#include "shared/spec/input_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto inputs = shoal::ParseInputs(text);
  if (!inputs.ok()) return 0;
  std::string spelled;
  for (const auto& in : *inputs) {
    if (in.SampleBytes() <= 0 || in.SampleBytes() > shoal::kMaxSampleBytes) std::abort();
    if (in.dims.size() > shoal::kMaxInputRank || in.dims[size_t(in.batch_pos)] != shoal::kBatchDim)
      std::abort();
    spelled += (spelled.empty() ? "" : ";") + shoal::InputText(in);
  }
  auto again = shoal::ParseInputs(spelled);
  if (!again.ok() || again->size() != inputs->size()) std::abort();
  for (size_t i = 0; i < inputs->size(); ++i)
    if ((*again)[i].dims != (*inputs)[i].dims || (*again)[i].dtype != (*inputs)[i].dtype ||
        (*again)[i].high != (*inputs)[i].high)
      std::abort();
  return 0;
}
