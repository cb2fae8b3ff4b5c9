// The tables a sweep prints: the published study's layout (rows = start method x sharing x device,
// columns = worker counts), rendered as Markdown, CSV, JSON and SVG, and compared cell by cell.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct ReportInput {
  v1::Sweep sweep;
  std::map<std::string, v1::Experiment> experiments;  // by id
};

struct Cell {
  bool has_value = false;
  double value = 0;
  std::string
      text;  // what is printed: a number, "-" (impossible), "n/a" (cannot run here), a state
  int footnote = 0;  // 1-based index into Table::footnotes, 0 for none
};

struct Row {
  std::string start, device;
  bool share = false;
  std::vector<Cell> cells;  // one per column
};

struct Table {
  std::string key;  // host_memory_gib, gpu_memory_gib, gpu_util_percent, samples_per_sec, ready_ms
  std::string title;
  std::vector<uint32_t> columns;  // worker counts
  std::vector<Row> rows;
  std::vector<std::string> footnotes;
  std::string empty_note;  // set when the table has no rows, saying why
};

std::vector<Table> BuildTables(const ReportInput& in);

std::string RenderMarkdown(const ReportInput& in);
// One line per grid point with every figure of its experiment.
std::string RenderCsv(const ReportInput& in);
nlohmann::json RenderJson(const ReportInput& in);
// Peak host memory against worker count, one polyline per row.
std::string RenderSvg(const ReportInput& in);
// The ratio b / a of every numeric cell of the CPU tables.
std::string RenderCompareMarkdown(const ReportInput& a, const ReportInput& b);

}  // namespace shoal
