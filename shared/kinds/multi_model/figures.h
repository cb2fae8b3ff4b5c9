// multi_model's hooks for the generic layers (shared/kinds/kind.h): its variants in the result,
// their tables, the original's block per variant.
#pragma once

#include <string>
#include <vector>

#include "shared/kinds/kind.h"

namespace shoal::multi_model {

void Summarize(const KindRunFacts& f, v1::Result* r);
std::vector<Table> ReportTables(const KindTablesInput& in);
std::string SpecLines(const v1::ExperimentSpec& s);
std::string DetailLines(const v1::Result& r);

}  // namespace shoal::multi_model
