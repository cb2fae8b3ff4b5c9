// What the CLI prints, as pure functions of the records (golden-tested in tests/format_test.cc).
#pragma once

#include <string>
#include <vector>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal::cli {

std::string StateName(v1::ExperimentState s);
// `get` / `submit --wait`: spec, memory, times, throughput, losses, epochs, processes.
std::string FormatExperiment(const v1::Experiment& e);
// `watch` off a terminal: one line per sample.
std::string FormatSampleLine(const v1::Sample& s);
// `watch` on a terminal: the redrawn table.
std::string FormatSampleTable(const v1::Sample& s, uint64_t dropped);
std::string FormatList(const std::vector<v1::Experiment>& es);
std::string FormatSweepPoints(const v1::Sweep& sw);
std::string FormatSweeps(const std::vector<v1::Sweep>& sweeps);
std::string FormatNode(const v1::NodeInfoResponse& n);
// "30d", "12h", "90m", "45s", "500ms" in milliseconds; the unit is required.
StatusOr<uint64_t> ParseDurationMs(const std::string& text);

}  // namespace shoal::cli
