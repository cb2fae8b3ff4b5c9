// data_parallel's hooks for the generic layers (shared/kinds/kind.h): its per-step figures in the
// result, its step and scaling tables, its replica lines.
#pragma once

#include <string>
#include <vector>

#include "shared/kinds/kind.h"

namespace shoal::data_parallel {

void Summarize(const KindRunFacts& f, v1::Result* r);
std::vector<Table> ReportTables(const KindTablesInput& in);
std::string ResultLines(const v1::Result& r);

}  // namespace shoal::data_parallel
