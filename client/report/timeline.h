// One experiment's memory over time, from the samples the daemon kept: a table (markdown or CSV)
// and an SVG chart of every process's PSS against time. Pure functions of the samples.
#pragma once

#include <string>
#include <vector>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

// The name of the series a sampled process belongs to: "leader", "forkserver", "worker 3", and
// "pool" for the forkserver's idle children, which are summed into one series.
std::string TimelineSeriesName(const v1::ProcessSample& p);

// Columns: t_s, the total PSS, RSS and USS in MiB, then the PSS in MiB of each series in order of
// first appearance (empty where the process was not sampled). format: "md" or "csv". Samples of a
// run across nodes (each with its node) add a node column after t_s, and their series are named
// "node N worker 0" etc.
std::string FormatTimeline(const std::vector<v1::Sample>& samples, const std::string& format);

// PSS (MiB) of each series and the total (dashed; one per node for a run across nodes)
// against seconds since the experiment (or the node's part) started.
std::string RenderTimelineSvg(const std::string& title, const std::vector<v1::Sample>& samples);

}  // namespace shoal
