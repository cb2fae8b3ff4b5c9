#include "shared/wire_check.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <cstdio>

namespace shoal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// By the field's path in the spec ("name", "optimizer.name", "base.dataset").
size_t MaxBytesOf(const std::string& path) {
  const std::string field = path.rfind("base.", 0) == 0 ? path.substr(5) : path;
  if (field == "name") return kMaxNameBytes;
  if (field == "dataset") return kMaxPathBytes;
  return kMaxWordBytes;
}

// Every set string field of `m` and of the messages in it.
Status CheckStringsOf(const Message& m, const std::string& prefix) {
  const auto* refl = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->is_repeated()) continue;  // specs have none
    const std::string name = prefix + f->name();
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      RETURN_IF_ERROR(CheckText(name, refl->GetString(m, f), MaxBytesOf(name)));
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
      RETURN_IF_ERROR(CheckStringsOf(refl->GetMessage(m, f), name + "."));
    }
  }
  return Status::Ok();
}

Status CheckList(const std::string& field, const google::protobuf::RepeatedPtrField<std::string>& v,
                 size_t max_bytes) {
  if (v.size() > kMaxAxisValues) {
    return InvalidArgument(field + ": " + std::to_string(v.size()) + " values, at most " +
                           std::to_string(kMaxAxisValues));
  }
  for (const auto& s : v) RETURN_IF_ERROR(CheckText(field, s, max_bytes));
  return Status::Ok();
}

}  // namespace

std::string QuoteShort(std::string_view value) {
  constexpr size_t kShown = 40;
  std::string out = "'";
  for (size_t i = 0; i < value.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  out += "'";
  if (value.size() > kShown) out += "... (" + std::to_string(value.size()) + " bytes)";
  return out;
}

Status CheckId(std::string_view id, std::string_view prefixes) {
  bool ok = id.size() == 11 && prefixes.find(id[0]) != std::string_view::npos;
  for (size_t i = 1; ok && i < id.size(); ++i) ok = IsHex(id[i]);
  if (ok) return Status::Ok();
  std::string want;
  for (char p : prefixes) want += std::string(want.empty() ? "" : " or ") + "'" + p + "'";
  return InvalidArgument("id: " + QuoteShort(id) + " is not an id (" + want +
                         " and 10 hex digits)");
}

Status CheckText(const std::string& field, std::string_view value, size_t max) {
  if (value.size() > max) {
    return InvalidArgument(field + ": " + std::to_string(value.size()) + " bytes, at most " +
                           std::to_string(max) + " (" + QuoteShort(value) + ")");
  }
  for (unsigned char c : value) {
    if (c < 0x20 || c == 0x7f)
      return InvalidArgument(field + ": control character in " + QuoteShort(value));
  }
  return Status::Ok();
}

Status CheckSpecStrings(const v1::ExperimentSpec& spec) { return CheckStringsOf(spec, ""); }

Status CheckSweepStrings(const v1::SweepSpec& sweep) {
  RETURN_IF_ERROR(CheckText("name", sweep.name(), kMaxNameBytes));
  RETURN_IF_ERROR(CheckStringsOf(sweep.base(), "base."));
  if (sweep.axes_size() > kMaxAxisValues)
    return InvalidArgument("axes: " + std::to_string(sweep.axes_size()) + " axes");
  for (const auto& a : sweep.axes()) {
    RETURN_IF_ERROR(CheckText("axes.field", a.field(), kMaxWordBytes));
    RETURN_IF_ERROR(CheckList(a.field() + " values", a.values(), MaxBytesOf(a.field())));
  }
  RETURN_IF_ERROR(CheckList("start", sweep.start(), kMaxWordBytes));
  RETURN_IF_ERROR(CheckList("device", sweep.device(), kMaxWordBytes));
  if (sweep.workers_size() > kMaxAxisValues || sweep.share_size() > kMaxAxisValues)
    return InvalidArgument("workers/share: more than " + std::to_string(kMaxAxisValues) +
                           " values");
  return Status::Ok();
}

}  // namespace shoal
