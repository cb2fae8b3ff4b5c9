// A sweep's grid: the cartesian product of its axes, each any field of the spec table
// (shared/spec/spec_fields.h). Axes are ordered as the table lists fields, whatever order the user
// gave them in; the first varies slowest and `workers`, last in the table, fastest, so one row of
// the study's tables runs its worker counts back to back. Points that cannot run are marked and
// explained.
#pragma once

#include <vector>

#include "shared/spec/spec.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

constexpr size_t kMaxSweepPoints = 1000;  // runs: grid points x repeats, on this daemon
// Placed on Slurm (spec.slurm), where the nodes run them at once: a sweep's whole study. Slurm's
// own MaxArraySize (1001 by default) must be above it too; sbatch says so when it is not.
constexpr size_t kMaxSlurmSweepPoints = 100000;
constexpr uint32_t kMaxRepeats = 100;

struct GridPoint {
  v1::SweepPoint point;     // note set when it cannot run
  v1::ExperimentSpec spec;  // defaults applied and validated (when it can run)
};

// The sweep's axes in grid order: its `axes`, and the lists of older sweeps (workers, start,
// share, device) read as axes. Refuses unknown fields, empty or repeated values, a field swept
// twice or also fixed in the base.
StatusOr<std::vector<v1::Axis>> SweepAxes(const v1::SweepSpec& sweep);

// Expands and validates the grid, each point `repeats` times, run-major (index = repeat x cells
// + cell). A bad value anywhere refuses the whole sweep.
StatusOr<std::vector<GridPoint>> ExpandGrid(const v1::SweepSpec& sweep, const SpecLimits& limits);

// Runs per grid point (1 when not given).
uint32_t Repeats(const v1::SweepSpec& s);
// How many grid cells a stored sweep has (its points / its repeats), and which one a point is.
size_t Cells(const v1::Sweep& s);
size_t CellOf(const v1::Sweep& s, const v1::SweepPoint& p);

// Sweeps that stop where memory ends. An experiment's error says it ran out of memory: the
// kernel's OOM killer (the leader's note), LibTorch's CPU or CUDA allocator, or admission's "does
// not fit" when its turn came.
bool IsOutOfMemory(const std::string& error);
// Whether a run ran out of memory: its cgroup's count of OOM kills first (the kernel's word, where
// its group has a memory controller: a program the OOM killer took says nothing of memory
// itself), else its error's words (IsOutOfMemory).
bool RanOutOfMemory(const v1::Experiment& e);
// The axes whose larger values need more memory: workers, batch_size, models, layers, filters,
// loaders, prefetch.
bool GrowsMemory(const std::string& field);
// Whether point `q` needs strictly more memory than `p` by the rule a sweep skips by: equal on
// every axis that does not grow memory, at least p's value on every one that does, and more on
// one of them. Points of other rows (another start, say) never do.
bool NeedsMoreThan(const v1::SweepPoint& q, const v1::SweepPoint& p);
// "workers 4, batch_size 64": a point's axis values.
std::string DescribePoint(const v1::SweepPoint& p);

// Succeeded, failed, cancelled or interrupted: nothing more will happen to it.
bool IsTerminal(v1::ExperimentState s);

// The state of a sweep from its points: queued, running, or how it ended.
v1::ExperimentState SweepState(const v1::Sweep& s, bool cancelled);

}  // namespace shoal
