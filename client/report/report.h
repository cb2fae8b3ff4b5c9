// The tables a sweep prints. Their layout follows the sweep's axes that vary: the worker count
// across when it varies (as the published study lays it out), else the last varying axis; the
// other varying axes label the rows; the fields that did not vary are listed once above them.
// Rendered as Markdown, CSV, JSON and SVG, and compared cell by cell.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/report/table.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct ReportInput {
  v1::Sweep sweep;
  std::map<std::string, v1::Experiment> experiments;  // by id
};

// The axes with more than one value, in grid order.
std::vector<v1::Axis> VaryingAxes(const v1::Sweep& sweep);
// "field value" for every spec field that is the same at every point (resolved values).
std::vector<std::pair<std::string, std::string>> FixedFields(const ReportInput& in);

std::vector<Table> BuildTables(const ReportInput& in);

// What the tables take for granted of a daemon's record, for one that came from elsewhere: every
// point names a value of each varying axis, and it is one of that axis's values.
Status CheckReportInput(const ReportInput& in);

// A daemon's answer (or one read back from a file) as the report's input, experiments by id.
ReportInput ReportInputOf(const v1::SweepReport& r);

// A sweep's report back from what RenderJson wrote (`report --format json`, `sweep --wait
// --json`): its "sweep" and "experiments", checked by CheckReportInput; InvalidArgument naming
// what does not parse or does not hold.
StatusOr<v1::SweepReport> SweepReportFromJson(const nlohmann::json& j);
StatusOr<ReportInput> ReportFromJson(const nlohmann::json& j);

// How many runs each cell holds and how the tables make one figure of them.
std::string RunsLine(const v1::Sweep& sweep);
// The kinds' notes about their points (KindRules::report_note; hogwild's "Turns: 2 of 4
// workers, ... stepped at once (why), ..."), "" where none has one.
std::string KindNotes(const ReportInput& in);
// Where the runs ran, from their records: "Host: <host>." or, over unlike hosts, each with its
// runs; "" when no record names its host (records from before hosts were recorded).
std::string HostsNote(const ReportInput& in);
std::string RenderMarkdown(const ReportInput& in);
// One line per grid point: its axis values, every spec field and every figure of its result.
std::string RenderCsv(const ReportInput& in);
nlohmann::json RenderJson(const ReportInput& in);
// "memory": peak host memory against the column axis, one polyline per row ("gpu-memory" and
// "gpu-util": the GPU tables', of the rows on a GPU).
// "loss": worker 0's training loss against steps, one polyline per point.
// "throughput": samples/s likewise. "pareto": samples/s against peak host memory, one point per
// cell (medians), the Pareto front joined.
std::string RenderSvg(const ReportInput& in, const std::string& plot = "memory");
// The points no other beats on both axes (less or equal x, more or equal y, one of them
// strictly): the front of minimum memory (x) for maximum throughput (y), by x.
std::vector<std::pair<double, double>> ParetoFront(std::vector<std::pair<double, double>> points);
// Whether any point is on a GPU (the GPU tables and plots exist).
bool HasGpuFigures(const ReportInput& in);
// The ratio b / a of every numeric cell the two sweeps share.
std::string RenderCompareMarkdown(const ReportInput& a, const ReportInput& b);

}  // namespace shoal
