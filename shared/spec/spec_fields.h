// The fields of an experiment spec a user can set, each under one name: the CLI flag (--name, '_'
// written '-'), the sweep axis, the report's column and docs/cli.md's field table all use it.
// Values travel as text and are parsed here, strictly, by the field's protobuf type.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct SpecField {
  std::string name;      // "batch_size", "optimizer", "lr"
  std::string path;      // the proto field: "batch_size", "optimizer.name", "optimizer.lr"
  std::string help;      // one line, for --help and docs/cli.md ({kinds}: SpecFieldHelp's)
  std::string fallback;  // what an unset field becomes, in words ("64", "per optimizer")
  bool axis = true;      // may be swept (name, force are labels and switches, not parameters)
  // A kind's field: listed after this one (in reports, CSV columns, the grid's order); empty:
  // after the common fields, in registry order.
  std::string after{};
};

// Each field's reference text by name (what, allowed values, ranges, what is refused), longer
// than its --help line: docs/cli-reference.md's table (shared/spec/spec_reference.cc).
const std::map<std::string, std::string>& SpecFieldReference();

// Every settable field, in the order the grid expands them (see ExpandGrid): the common ones,
// each kind's own (KindRules::fields, their paths in the kind's message: "pipeline.stages"),
// then workers, name and force.
const std::vector<SpecField>& SpecFields();
// The fields every kind's spec has (ExperimentSpec outside its `settings`): what a kind's
// KindRules::ignores names from. Never reads the registry.
const std::vector<SpecField>& CommonSpecFields();
// The kind whose settings message a spec path starts in ("pipeline" for "pipeline.stages");
// "" for a common one ("batch_size", "optimizer.lr").
std::string SettingsKindOf(const std::string& path);
// The kind whose message holds the field (SettingsKindOf its path).
inline std::string FieldKind(const SpecField& f) { return SettingsKindOf(f.path); }
// The kind whose message the spec holds (its `settings`); "" when none.
std::string SettingsKind(const v1::ExperimentSpec& spec);
// The kinds the registry holds, "hogwild | ... | command" (shared/kinds/registry.cc): a kind
// added is named in --help and the generated reference with no edit of a list (a hand-kept one
// left out `command`). Not while the registry is being built: a kind's rules read SpecFields.
std::string KindList();
// A field's --help line, "{kinds}" replaced by KindList().
std::string SpecFieldHelp(const SpecField& f);
// The field called `name` (or its flag spelling, "batch-size"); nullptr when there is none.
const SpecField* FindSpecField(const std::string& name);

// Parses `text` by the field's type and sets it (a kind's field only while the spec holds no
// other kind's settings: INVALID_ARGUMENT naming both): uint32/uint64 decimal digits only, double a
// finite number, bool yes/no/true/false/1/0. The error names the field and quotes the text.
Status SetSpecField(v1::ExperimentSpec* spec, const SpecField& f, const std::string& text);
// Fields by name with their values as text (SubmitRequest.fields: the Python package's keyword
// arguments) set onto `spec` as the CLI sets its options: an unknown name, a name given twice or
// also set in `spec`, or a value its field refuses is INVALID_ARGUMENT naming it.
Status SetSpecFieldTexts(v1::ExperimentSpec* spec,
                         const google::protobuf::RepeatedPtrField<v1::AxisValue>& fields);
// True when the field is present (given by the user or filled by ApplyDefaults).
bool HasSpecField(const v1::ExperimentSpec& spec, const SpecField& f);
// Removes the field (absent again).
void ClearSpecField(v1::ExperimentSpec* spec, const SpecField& f);
// `v` in the fewest significant digits that read back as `v` ("0.1", "1.0000001", "1e-10").
std::string ShortDouble(double v);
// The field's value as text ("" when absent): integers in decimal, doubles shortest
// round-trip (%.17g trimmed), bools yes/no.
std::string SpecFieldText(const v1::ExperimentSpec& spec, const SpecField& f);

}  // namespace shoal
