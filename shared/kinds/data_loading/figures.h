// data_loading's hooks for the generic layers (shared/kinds/kind.h): its per-epoch and memory
// tables, its spec line, its trainer and loaders.
#pragma once

#include <string>
#include <vector>

#include "shared/kinds/kind.h"

namespace shoal::data_loading {

std::vector<Table> ReportTables(const KindTablesInput& in);
std::string SpecLines(const v1::ExperimentSpec& s);
std::string RoleName(const v1::ProcessInfo& p);
// Its part of the result: each epoch's load CPU (DataLoadingResult).
void Summarize(const KindRunFacts& f, v1::Result* r);
// Its column of `get`'s epochs table: the epoch's load CPU in seconds ("" when not measured).
std::string EpochCell(const v1::Result& r, uint32_t epoch);

}  // namespace shoal::data_loading
