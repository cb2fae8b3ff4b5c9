// baseline's hooks for the generic layers (shared/kinds/kind.h): its figure in the result, its
// table in a sweep's report, its line in `shoal get`.
#pragma once

#include <string>
#include <vector>

#include "shared/kinds/kind.h"

namespace shoal::baseline {

void Summarize(const KindRunFacts& f, v1::Result* r);
std::vector<Table> ReportTables(const KindTablesInput& in);
std::string SpecLines(const v1::ExperimentSpec& s);
std::string ResultLines(const v1::Result& r);

}  // namespace shoal::baseline
