// The vocabulary of a sweep's report tables, shared by the renderer (client/report/report.h) and
// each kind's own tables (KindRules::report_tables): a table with its rows and cells, a grid point
// as the tables see it, and the helpers that make a cell. No kind is named here.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct Cell {
  bool has_value = false;
  double value = 0;
  std::string text;   // a number, "-" (impossible), "n/a" (cannot run here), or a state
  int footnote = 0;   // 1-based index into Table::footnotes, 0 for none
  bool ratio = true;  // --compare may divide it: not an intercept, which may be near 0 or below
  const char* format = nullptr;  // how `value` was written (Value sets it)
  // A cell of repeated runs: `value` is the median of `runs` figures, lo and hi their extremes.
  int runs = 0;
  double lo = 0, hi = 0;
  bool noisy = false;  // hi - lo > kNoisySpread x |median|
};

// A repeated cell whose runs spread over more than this share of their median is marked noisy.
constexpr double kNoisySpread = 0.10;

struct Row {
  std::vector<std::string> labels;  // one per row field
  std::vector<Cell> cells;          // one per column
};

struct Table {
  std::string key;  // host_memory_gib, samples_per_sec, epoch_train_s, loss_by_step, ...
  std::string title;
  std::string column_field;             // what the columns are ("workers", "step", "epoch")
  std::vector<std::string> columns;     // column headings
  std::vector<std::string> row_fields;  // what the row labels are
  std::vector<Row> rows;
  std::vector<std::string> footnotes;
  std::string empty_note;  // set when the table has no rows, saying why
};

// One grid point (a cell of the grid, with all its repeated runs) as the tables see it.
struct PointView {
  const v1::SweepPoint* point;  // its first run's point that is not skipped, else its first
  // The run a kind's own tables show: of the runs the cell's medians count, the one with the
  // median throughput; else its latest run that has a record; nullptr when none ran.
  const v1::Experiment* experiment;
  std::map<std::string, std::string> values;
  // How a row shows a model file: "mynet.pt (sha256:0123abcd)", by its hash.
  std::shared_ptr<const std::map<std::string, std::string>> file_names;
  // Every run's record, in repeat order (one for a sweep without repeats), and how many runs the
  // cell has, records or not (a skipped run has none).
  std::vector<const v1::Experiment*> runs = {};
  size_t repeats = 1;
};

// The grid tables' shape: the worker count across when it varies, else the last varying axis;
// the other varying axes label the rows.
struct ReportLayout {
  std::string column_field;  // "" when nothing varies
  std::vector<std::string> columns;
  std::vector<std::string> row_fields;
};

namespace report {

using Getter = std::function<std::optional<double>(const v1::Result&)>;

std::string Fmt(const char* format, double v);
std::string Lower(std::string s);
// The footnote's 1-based number in `t`, added when new.
int Footnote(Table& t, const std::string& note);
// The runs a cell's figures are the medians of: its succeeded runs, less the disturbed ones while
// an undisturbed one is left.
std::vector<const v1::Experiment*> CountedRuns(const PointView& v);
// Whether two records' hosts are one machine for comparing figures: the same name and CPU model.
bool SameHost(const v1::Host& a, const v1::Host& b);
// A cell for one point: its figure (the median over its counted runs, with their spread, when it
// has repeats), or why there is none (its state, or the sweep's note).
Cell PointCell(const PointView& v, Table& t, bool gpu, const Getter& get, const char* format);
// The cells of one point's counted runs as one: the first with a single run; else their median,
// spread and noisy mark, with a footnote when some runs had no figure. Empty `cells`: "-".
Cell Summarize(const std::vector<Cell>& cells, const PointView& v, Table& t);
// The point's values of `fields`, a model file by its name.
std::vector<std::string> Labels(const PointView& v, const std::vector<std::string>& fields);
// The column a point's cell goes in: its value of the column axis (0 when nothing varies).
size_t ColumnOf(const PointView& v, const ReportLayout& l);
// One row per point, labelled by every varying axis (`fields`); the columns are given, and a
// point that did not succeed shows why in every cell.
Table PointTable(const std::vector<PointView>& points, const std::vector<std::string>& fields,
                 const char* key, const char* title, const char* column_field,
                 std::vector<std::string> columns,
                 const std::function<Cell(const v1::Experiment&, size_t column)>& cell);
Cell Value(double v, const char* format);
Cell Missing();  // "-"
// An optional figure's cell: its value where known, "-" where not.
Cell ValueIf(bool known, double v, const char* format);

}  // namespace report
}  // namespace shoal
