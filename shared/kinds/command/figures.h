// command's hooks for the generic layers (shared/kinds/kind.h): its spec line (the program and
// its environment), the report lines it ignored.
#pragma once

#include <string>

#include "shared/kinds/kind.h"

namespace shoal::command {

void Summarize(const KindRunFacts& f, v1::Result* r);
std::string SpecLines(const v1::ExperimentSpec& s);
std::string ResultLines(const v1::Result& r);

// argv as a shell would need it typed: each argument in single quotes unless it is plain.
std::string QuotedArgv(const google::protobuf::RepeatedPtrField<std::string>& argv);

}  // namespace shoal::command
