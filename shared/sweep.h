// A sweep's grid: the cartesian product of its lists, in a stable order (start, share, device,
// then workers), with the points that cannot run marked and explained.
#pragma once

#include <vector>

#include "shared/spec.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct GridPoint {
  v1::SweepPoint point;     // note set when it cannot run
  v1::ExperimentSpec spec;  // defaults applied and validated (when it can run)
};

// Expands and validates the grid. A bad value anywhere refuses the whole sweep.
StatusOr<std::vector<GridPoint>> ExpandGrid(const v1::SweepSpec& sweep, const SpecLimits& limits);

// Succeeded, failed, cancelled or interrupted: nothing more will happen to it.
bool IsTerminal(v1::ExperimentState s);

// The state of a sweep from its points: queued, running, or how it ended.
v1::ExperimentState SweepState(const v1::Sweep& s, bool cancelled);

}  // namespace shoal
