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

}  // namespace shoal::data_loading
