// hogwild's hooks for the generic layers (shared/kinds/kind.h): its turns at the steps in
// `shoal get` and in a sweep's report.
#pragma once

#include <string>
#include <vector>

#include "shared/kinds/kind.h"

namespace shoal::hogwild {

std::string SettingLines(const v1::ExperimentSpec& s);
// Fewer of its workers stepped at once than it has: they took turns and shared step arenas.
bool TookTurns(const v1::ExperimentSpec& s);
// "Turns: 2 of 4 workers, ... stepped at once (why), ...": "" where none took turns.
std::string ReportNote(const std::vector<PointView>& points);

}  // namespace shoal::hogwild
