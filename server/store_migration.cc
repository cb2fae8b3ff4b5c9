#include "server/store_migration.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

#include <cstring>

namespace shoal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::UnknownField;
using google::protobuf::UnknownFieldSet;

struct Moved {
  int number;         // its number in ExperimentSpec before it moved
  const char* kind;   // the settings message it lives in now
  const char* field;  // its name there
};

// ExperimentSpec's fields 21-36, 45-47, 50 and 51 as they were numbered.
constexpr Moved kSpecFields[] = {
    {21, "multi_model", "models"},
    {22, "multi_model", "iterations"},
    {23, "data_loading", "loaders"},
    {24, "data_loading", "prefetch"},
    {25, "data_loading", "pin_memory"},
    {26, "data_parallel", "scaling"},
    {27, "data_parallel", "nodes"},
    {28, "data_parallel", "node_rank"},
    {29, "data_parallel", "master"},
    {30, "data_parallel", "node_daemons"},  // retired with the federation: dropped
    {31, "pipeline", "layers"},
    {32, "pipeline", "filters"},
    {33, "pipeline", "stages"},
    {34, "pipeline", "balance"},
    {35, "pipeline", "chunks"},
    {36, "pipeline", "checkpoint"},
    {45, "command", "argv"},
    {46, "command", "env"},
    {47, "command", "cwd"},
    {50, "hogwild", "concurrent_steps"},
    {51, "hogwild", "concurrent_steps_why"},
};

// Sets `to` (a scalar or repeated string, uint32 or bool) from the wire value `u`.
void SetFromWire(Message* m, const FieldDescriptor* to, const UnknownField& u) {
  const auto* r = m->GetReflection();
  switch (to->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32:
      if (u.type() == UnknownField::TYPE_VARINT) r->SetUInt32(m, to, uint32_t(u.varint()));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      if (u.type() == UnknownField::TYPE_VARINT) r->SetBool(m, to, u.varint() != 0);
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      if (u.type() != UnknownField::TYPE_LENGTH_DELIMITED) break;
      if (to->is_repeated()) {
        r->AddString(m, to, u.length_delimited());
      } else {
        r->SetString(m, to, u.length_delimited());
      }
      break;
    default:
      break;
  }
}

const Moved* SpecFieldNumbered(int number) {
  for (const Moved& f : kSpecFields)
    if (f.number == number) return &f;
  return nullptr;
}

void MigrateResult(v1::Result* r) {
  UnknownFieldSet* u = r->GetReflection()->MutableUnknownFields(r);
  for (int i = 0; i < u->field_count(); ++i) {
    const UnknownField& f = u->field(i);
    if (f.number() == 34 && f.type() == UnknownField::TYPE_LENGTH_DELIMITED)
      (void)r->mutable_multi_model()->add_variants()->ParseFromString(f.length_delimited());
    if (f.number() == 44 && f.type() == UnknownField::TYPE_VARINT)
      r->mutable_command()->set_report_lines_ignored(f.varint());
  }
  u->DeleteByNumber(34);
  u->DeleteByNumber(44);
  for (auto& epoch : *r->mutable_epochs()) {  // EpochResult.load_cpu_ms was 8, a double
    UnknownFieldSet* eu = epoch.GetReflection()->MutableUnknownFields(&epoch);
    for (int i = 0; i < eu->field_count(); ++i) {
      const UnknownField& f = eu->field(i);
      if (f.number() != 8 || f.type() != UnknownField::TYPE_FIXED64) continue;
      const uint64_t bits = f.fixed64();
      double ms;
      static_assert(sizeof ms == sizeof bits);
      std::memcpy(&ms, &bits, sizeof ms);
      auto* x = r->mutable_data_loading()->add_epochs();
      x->set_epoch(epoch.epoch());
      x->set_load_cpu_ms(ms);
    }
    eu->DeleteByNumber(8);
  }
}

}  // namespace

// DataParallelSpec's nodes, node_rank and master (2-4) became ExperimentSpec's (command reads them
// too); node_daemons (5) was retired and is dropped.
void MigrateNodeFields(v1::ExperimentSpec* spec) {
  if (!spec->has_data_parallel()) return;
  v1::DataParallelSpec* dp = spec->mutable_data_parallel();
  UnknownFieldSet* u = dp->GetReflection()->MutableUnknownFields(dp);
  const auto* to = v1::ExperimentSpec::descriptor();
  for (int i = 0; i < u->field_count(); ++i) {
    const int n = u->field(i).number();
    const char* name = n == 2 ? "nodes" : n == 3 ? "node_rank" : n == 4 ? "master" : nullptr;
    if (name != nullptr) SetFromWire(spec, to->FindFieldByName(name), u->field(i));
  }
  for (int n = 2; n <= 5; ++n) u->DeleteByNumber(n);
}

void MigrateSpec(v1::ExperimentSpec* spec) {
  MigrateNodeFields(spec);
  UnknownFieldSet* u = spec->GetReflection()->MutableUnknownFields(spec);
  if (u->empty()) return;
  const auto* settings = v1::ExperimentSpec::descriptor();
  for (int i = 0; i < u->field_count(); ++i) {
    const Moved* moved = SpecFieldNumbered(u->field(i).number());
    // Only the spec's own kind's: the daemon never stored another kind's field.
    if (moved == nullptr || spec->kind() != moved->kind) continue;
    Message* kind =
        spec->GetReflection()->MutableMessage(spec, settings->FindFieldByName(moved->kind));
    // A field moved again since (nodes, node_rank, master: the spec's own now) goes there; one
    // since retired (node_daemons) is dropped with the rest of the unknown ones.
    if (const FieldDescriptor* to = kind->GetDescriptor()->FindFieldByName(moved->field))
      SetFromWire(kind, to, u->field(i));
    else if (const FieldDescriptor* top = settings->FindFieldByName(moved->field))
      SetFromWire(spec, top, u->field(i));
  }
  for (const Moved& f : kSpecFields) u->DeleteByNumber(f.number);
}

void MigrateRecord(v1::Experiment* e) {
  MigrateSpec(e->mutable_spec());
  if (e->has_result()) MigrateResult(e->mutable_result());
}

void MigrateRecord(v1::Sweep* s) {
  if (s->has_spec()) MigrateSpec(s->mutable_spec()->mutable_base());
}

}  // namespace shoal
