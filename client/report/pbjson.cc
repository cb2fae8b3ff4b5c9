#include "client/report/pbjson.h"

namespace shoal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

nlohmann::json Scalar(const Message& m, const Reflection* r, const FieldDescriptor* f, int i) {
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, i) : r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64:
      return rep ? r->GetRepeatedInt64(m, f, i) : r->GetInt64(m, f);
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, i) : r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, i) : r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return rep ? r->GetRepeatedDouble(m, f, i) : r->GetDouble(m, f);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return rep ? r->GetRepeatedFloat(m, f, i) : r->GetFloat(m, f);
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, i) : r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM: {
      // A value this version does not name (a newer peer's) is its number, as the proto3 JSON
      // mapping writes it, so that it reads back as itself.
      const int v = rep ? r->GetRepeatedEnumValue(m, f, i) : r->GetEnumValue(m, f);
      const auto* known = f->enum_type()->FindValueByNumber(v);
      return known != nullptr ? nlohmann::json(known->name()) : nlohmann::json(v);
    }
    case FieldDescriptor::CPPTYPE_STRING:
      return rep ? r->GetRepeatedString(m, f, i) : r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return ToJson(rep ? r->GetRepeatedMessage(m, f, i) : r->GetMessage(m, f));
  }
  return nullptr;
}

}  // namespace

nlohmann::json ToJson(const Message& m) {
  nlohmann::json out = nlohmann::json::object();
  const auto* d = m.GetDescriptor();
  const auto* r = m.GetReflection();
  for (int k = 0; k < d->field_count(); ++k) {
    const FieldDescriptor* f = d->field(k);
    if (f->is_map()) {
      nlohmann::json obj = nlohmann::json::object();
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        const Message& entry = r->GetRepeatedMessage(m, f, i);
        nlohmann::json e = ToJson(entry);
        obj[e["key"].get<std::string>()] = e["value"];
      }
      out[f->name()] = obj;
    } else if (f->is_repeated()) {
      nlohmann::json arr = nlohmann::json::array();
      for (int i = 0; i < r->FieldSize(m, f); ++i) arr.push_back(Scalar(m, r, f, i));
      out[f->name()] = arr;
    } else if (f->has_presence() && !r->HasField(m, f)) {
      if (f->real_containing_oneof() != nullptr) continue;  // only the member that is set
      // An absent optional scalar is null, never 0; so is a message declared optional (a kind's
      // figures, absent for other kinds); any other absent message prints its defaults.
      const bool defaults =
          f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !f->has_optional_keyword();
      out[f->name()] = defaults ? Scalar(m, r, f, 0) : nlohmann::json();
    } else {
      out[f->name()] = Scalar(m, r, f, 0);
    }
  }
  return out;
}

}  // namespace shoal
