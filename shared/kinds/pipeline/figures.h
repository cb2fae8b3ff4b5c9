// pipeline's hooks for the generic layers (shared/kinds/kind.h): its stages in the result, GPipe's
// Table 1 per point, its stage lines.
#pragma once

#include <string>
#include <vector>

#include "shared/kinds/kind.h"

namespace shoal::pipeline {

void Summarize(const KindRunFacts& f, v1::Result* r);
std::vector<Table> ReportTables(const KindTablesInput& in);
std::string ResultLines(const v1::Result& r);

}  // namespace shoal::pipeline
