#include "shared/spec/input_spec.h"

#include <algorithm>
#include <map>

namespace shoal {
namespace {

const std::map<std::string, int64_t>& Dtypes() {
  static const std::map<std::string, int64_t> m = {
      {"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2},
      {"int64", 8},   {"int32", 4},   {"uint8", 1},   {"bool", 1},
  };
  return m;
}

std::string Names() {
  std::string out;
  for (const auto& [name, bytes] : Dtypes()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// A positive decimal of at most 9 digits (a dimension, a range's end); -1 when it is not one.
int64_t PositiveNumber(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  const int64_t v = std::stoll(s);
  return v > 0 ? v : -1;
}

Status Bad(const std::string& part, const std::string& why) {
  std::string shown = part.size() > 60 ? part.substr(0, 60) + "..." : part;
  return InvalidArgument("input: '" + shown + "' " + why +
                         " (want DTYPE[B,dims...] with B the batch, e.g. float32[B,3,32,32] or "
                         "int64[B,16]:1000; several separated by ';')");
}

Status ParseDims(const std::string& part, const std::string& body, InputSpec* in) {
  size_t from = 0;
  for (;;) {
    const size_t comma = body.find(',', from);
    const std::string d = body.substr(from, comma == std::string::npos ? comma : comma - from);
    if (d == "B") {
      if (std::count(in->dims.begin(), in->dims.end(), kBatchDim) > 0)
        return Bad(part, "names the batch B twice");
      in->batch_pos = int64_t(in->dims.size());
      in->dims.push_back(kBatchDim);
    } else {
      const int64_t v = PositiveNumber(d);
      if (v < 0) return Bad(part, "has dimension '" + d + "', not B or a positive number");
      in->dims.push_back(v);
    }
    if (comma == std::string::npos) break;
    from = comma + 1;
  }
  if (std::count(in->dims.begin(), in->dims.end(), kBatchDim) == 0)
    return Bad(part, "has no batch dimension B");
  if (in->dims.size() > kMaxInputRank)
    return Bad(part, "has " + std::to_string(in->dims.size()) + " dimensions; at most " +
                         std::to_string(kMaxInputRank));
  return Status::Ok();
}

StatusOr<InputSpec> ParseOne(const std::string& part) {
  InputSpec in;
  const size_t open = part.find('['), close = part.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open)
    return Bad(part, "is not DTYPE[...]");
  in.dtype = part.substr(0, open);
  if (Dtypes().count(in.dtype) == 0)
    return Bad(part, "has dtype '" + in.dtype + "', not one of: " + Names());
  RETURN_IF_ERROR(ParseDims(part, part.substr(open + 1, close - open - 1), &in));
  const std::string tail = part.substr(close + 1);
  if (in.floating() || in.dtype == "bool") {
    if (!tail.empty())
      return Bad(part, "has '" + tail + "' after ']' (only integer inputs take :N)");
  } else {
    if (tail.empty() || tail[0] != ':' || (in.high = PositiveNumber(tail.substr(1))) < 0)
      return Bad(part, "is an integer input without its range: add :N for values in [0, N)");
    if (in.dtype == "uint8" && in.high > 256) return Bad(part, "ranges past uint8's 256 values");
  }
  if (in.SampleBytes() > kMaxSampleBytes)
    return Bad(part, "is " + std::to_string(in.SampleBytes()) + " bytes a sample; at most " +
                         std::to_string(kMaxSampleBytes));
  return in;
}

}  // namespace

bool InputSpec::floating() const {
  return dtype == "float32" || dtype == "float64" || dtype == "float16" || dtype == "bfloat16";
}

std::vector<int64_t> InputSpec::SampleDims() const {
  std::vector<int64_t> out;
  for (int64_t d : dims)
    if (d != kBatchDim) out.push_back(d);
  return out;
}

int64_t InputSpec::SampleElements() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d == kBatchDim) continue;
    n *= d;
    if (n > kMaxSampleBytes) return kMaxSampleBytes + 1;  // no overflow: bounded dims, few of them
  }
  return n;
}

int64_t InputSpec::SampleBytes() const { return SampleElements() * DtypeBytes(dtype); }

int64_t DtypeBytes(const std::string& dtype) {
  auto it = Dtypes().find(dtype);
  return it == Dtypes().end() ? 0 : it->second;
}

StatusOr<std::vector<InputSpec>> ParseInputs(const std::string& text) {
  if (text.empty()) return InvalidArgument("input: empty (want e.g. float32[B,3,32,32])");
  std::vector<InputSpec> out;
  size_t from = 0;
  for (;;) {
    const size_t semi = text.find(';', from);
    const std::string part = text.substr(from, semi == std::string::npos ? semi : semi - from);
    if (part.empty()) return InvalidArgument("input: '" + text + "' has an empty part");
    ASSIGN_OR_RETURN(InputSpec in, ParseOne(part));
    out.push_back(std::move(in));
    if (out.size() > kMaxInputs)
      return InvalidArgument("input: more than " + std::to_string(kMaxInputs) + " inputs");
    if (semi == std::string::npos) return out;
    from = semi + 1;
  }
}

std::string InputText(const InputSpec& in) {
  std::string out = in.dtype + "[";
  for (size_t i = 0; i < in.dims.size(); ++i)
    out +=
        (i ? "," : "") + (in.dims[i] == kBatchDim ? std::string("B") : std::to_string(in.dims[i]));
  out += "]";
  if (in.high > 0) out += ":" + std::to_string(in.high);
  return out;
}

int64_t SyntheticSamples(int64_t sample_bytes, int64_t batch_size) {
  const int64_t fit = (int64_t(256) << 20) / std::max<int64_t>(1, sample_bytes);
  return std::max(batch_size, std::min<int64_t>(1024, fit));
}

const std::vector<std::string>& LossNames() {
  static const std::vector<std::string> names = {"cross_entropy", "mse", "output"};
  return names;
}

}  // namespace shoal
