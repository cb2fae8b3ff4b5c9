// One experiment's record as a trace in the Chrome trace-event format (JSON), which Perfetto,
// chrome://tracing and Holistic Trace Analysis's loaders open: a track per process with the
// slices of its life, counters of its memory, the sums and the GPUs, and the run's events as
// instants (docs/trace.md). A pure function of the record: the daemon's Trace answers it, `shoal
// trace` and the Python package print what that answers.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <vector>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

// At most this many samples become counters: a longer run's are thinned evenly, keeping the
// first, the last and the one with the peak PSS sum, so a trace stays a few MB however long the
// run.
inline constexpr size_t kTraceMaxSamples = 2000;

// Timestamps are microseconds since the experiment started: the clock of its samples (t_ms) and
// of the report's timeline. Memory counters are in MiB.
nlohmann::json RenderTrace(const v1::Experiment& e, const std::vector<v1::Sample>& samples,
                           const std::vector<v1::Event>& events,
                           size_t max_samples = kTraceMaxSamples);

}  // namespace shoal
