#include "shared/spec/wire_check.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <algorithm>
#include <cstdio>

#include "shared/spec/spec_fields.h"

namespace shoal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

bool IsHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

// The length of the UTF-8 sequence at s[i] and its code point; 0 when it is not valid UTF-8
// (overlong forms, surrogates and truncated sequences included).
size_t Utf8At(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  uint32_t v = n == 1 ? c : c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    v = (v << 6) | (b(k) & 0x3f);
  }
  static const uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  *cp = v;
  return n;
}

// C0, DEL and C1: what a terminal may take as the start of an escape sequence.
bool IsControl(uint32_t cp) { return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f); }

// A path inside a kind's settings without the kind ("data_parallel.master": "master").
std::string WithoutKind(const std::string& path) {
  const std::string kind = SettingsKindOf(path);
  return kind.empty() ? path : path.substr(kind.size() + 1);
}

// By the field's path in the spec ("name", "optimizer.name", "base.dataset",
// "data_parallel.master").
size_t MaxBytesOf(const std::string& path) {
  const std::string field = WithoutKind(path.rfind("base.", 0) == 0 ? path.substr(5) : path);
  if (field == "name") return kMaxNameBytes;
  if (field == "dataset") return kMaxPathBytes;
  if (field == "master") return kMaxHostPortBytes;
  if (field == "balance" || field == "cuda_devices") return kMaxListBytes;
  if (field == "model_file") return kMaxRefBytes;
  if (field == "input") return kMaxInputBytes;
  return kMaxWordBytes;
}

// Every set string field of `m` and of the messages in it.
// A command's arguments and environment entries: as many and as long as the kind takes.
constexpr int kMaxArgs = 256;
constexpr size_t kMaxArgBytes = 4096;

Status CheckStringsOf(const Message& m, const std::string& prefix) {
  const auto* refl = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    const std::string name = prefix + f->name();
    if (f->is_repeated()) {  // a command's argv and env: strings, each an argument
      if (f->type() != FieldDescriptor::TYPE_STRING) continue;
      const int n = refl->FieldSize(m, f);
      if (n > kMaxArgs)
        return InvalidArgument(name + ": " + std::to_string(n) + " values, at most " +
                               std::to_string(kMaxArgs));
      for (int i = 0; i < n; ++i)
        RETURN_IF_ERROR(CheckText(name, refl->GetRepeatedString(m, f, i), kMaxArgBytes));
      continue;
    }
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
  // The other kind of id, well formed: say which kind this call takes.
  bool other = id.size() == 11 && (id[0] == 'x' || id[0] == 's');
  for (size_t i = 1; other && i < id.size(); ++i) other = IsHex(id[i]);
  if (other) {
    return InvalidArgument("id: " + QuoteShort(id) + " is " +
                           (id[0] == 's' ? "a sweep's id; this takes an experiment's ('x...')"
                                         : "an experiment's id; this takes a sweep's ('s...')"));
  }
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
  for (size_t i = 0; i < value.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8At(value, i, &cp);
    if (n == 0) return InvalidArgument(field + ": not valid UTF-8: " + QuoteShort(value));
    if (IsControl(cp))
      return InvalidArgument(field + ": control character in " + QuoteShort(value));
    i += n;
  }
  return Status::Ok();
}

std::string PrintableText(std::string_view value) {
  std::string out;
  for (size_t i = 0; i < value.size();) {
    uint32_t cp = 0;
    const size_t n = Utf8At(value, i, &cp);
    if (n > 0 && !IsControl(cp)) {
      out.append(value.substr(i, n));
      i += n;
      continue;
    }
    // An escaped byte per byte of what could not be shown (a C1 character is two).
    for (size_t k = 0; k < std::max<size_t>(n, 1); ++k) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(value[i + k]));
      out += buf;
    }
    i += std::max<size_t>(n, 1);
  }
  return out;
}

void MakePrintable(Message* m) {
  const auto* refl = m->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(*m, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      if (!f->is_repeated()) {
        refl->SetString(m, f, PrintableText(refl->GetString(*m, f)));
        continue;
      }
      for (int i = 0; i < refl->FieldSize(*m, f); ++i)
        refl->SetRepeatedString(m, f, i, PrintableText(refl->GetRepeatedString(*m, f, i)));
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (!f->is_repeated()) {
        MakePrintable(refl->MutableMessage(m, f));
        continue;
      }
      for (int i = 0; i < refl->FieldSize(*m, f); ++i)
        MakePrintable(refl->MutableRepeatedMessage(m, f, i));
    }
  }
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
