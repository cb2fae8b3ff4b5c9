// What the CLI prints, as pure functions of the records (golden-tested in tests/format_test.cc).
#pragma once

#include <string>
#include <vector>

#include "shared/report/text.h"
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
// `get` of a sweep's point: which point and run it is, and every run of its cell with its state
// and throughput.
std::string FormatSweepRuns(const v1::Experiment& e, const v1::SweepReport& r);
std::string FormatSweeps(const std::vector<v1::Sweep>& sweeps);
std::string FormatNode(const v1::NodeInfoResponse& n);

// "30d", "12h", "90m", "45s", "500ms" in milliseconds; the unit is required.
StatusOr<uint64_t> ParseDurationMs(const std::string& text);

// Rank N's lines of a command's log, as `logs --worker N` prints them: the lines prefixed
// "[rank N] " (the leader writes each rank's output so), the prefix taken off; fed the log in
// pieces, a line cut between two is held until its end (`end`: none will come).
class RankLines {
 public:
  explicit RankLines(uint32_t rank) : prefix_(text::WorkerLinePrefix(rank)) {}
  std::string Take(const std::string& data, bool end);

 private:
  std::string prefix_, partial_;
};

}  // namespace shoal::cli
