#include "shared/report/table.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace shoal::report {

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

int Footnote(Table& t, const std::string& note) {
  auto f = std::find(t.footnotes.begin(), t.footnotes.end(), note);
  if (f == t.footnotes.end()) f = t.footnotes.insert(t.footnotes.end(), note);
  return static_cast<int>(f - t.footnotes.begin()) + 1;
}

// A cell for one point: its figure, or why there is none.
Cell PointCell(const PointView& v, Table& t, bool gpu, const Getter& get, const char* format) {
  Cell c;
  const auto& p = *v.point;
  if (!p.note().empty()) {
    c.text = p.note().rfind("impossible", 0) == 0 ? "-" : "n/a";
    c.footnote = Footnote(t, p.note());
    return c;
  }
  if (v.experiment == nullptr) {
    c.text = Lower(v1::ExperimentState_Name(p.state()));
    return c;
  }
  if (v.experiment->state() != v1::SUCCEEDED) {
    c.text = Lower(v1::ExperimentState_Name(v.experiment->state()));
    return c;
  }
  auto value = get(v.experiment->result());
  if (!value) {
    c.text = "-";
    const std::string& why = v.experiment->result().gpu_status();
    if (gpu && !why.empty()) c.footnote = Footnote(t, why);
    return c;
  }
  c.has_value = true;
  c.value = *value;
  c.text = Fmt(format, c.value);
  return c;
}

std::vector<std::string> Labels(const PointView& v, const std::vector<std::string>& fields) {
  std::vector<std::string> out;
  for (const auto& f : fields) {
    out.push_back(v.values.count(f) ? v.values.at(f) : "");
    if (f != "model_file" || v.file_names == nullptr) continue;
    auto named = v.file_names->find(out.back());
    if (named != v.file_names->end()) out.back() = named->second;
  }
  return out;
}

// The column a point's cell goes in: its value of the column axis (0 when nothing varies).
size_t ColumnOf(const PointView& v, const ReportLayout& l) {
  if (l.column_field.empty()) return 0;
  return size_t(std::find(l.columns.begin(), l.columns.end(), v.values.at(l.column_field)) -
                l.columns.begin());
}

// One row per point, labelled by every varying axis; the columns are given.
Table PointTable(const std::vector<PointView>& points, const std::vector<std::string>& fields,
                 const char* key, const char* title, const char* column_field,
                 std::vector<std::string> columns,
                 const std::function<Cell(const v1::Experiment&, size_t column)>& cell) {
  Table t;
  t.key = key;
  t.title = title;
  t.column_field = column_field;
  t.columns = std::move(columns);
  t.row_fields = fields;
  for (const auto& v : points) {
    Row r{Labels(v, fields), std::vector<Cell>(t.columns.size())};
    const Cell state = PointCell(
        v, t, false, [](const v1::Result&) { return 0.0; }, "%.0f");
    for (size_t k = 0; k < t.columns.size(); ++k)
      r.cells[k] = state.has_value ? cell(*v.experiment, k) : state;
    t.rows.push_back(std::move(r));
  }
  return t;
}

Cell Value(double v, const char* format) {
  Cell c;
  c.has_value = true;
  c.value = v;
  c.text = Fmt(format, v);
  return c;
}

Cell Missing() {
  Cell c;
  c.text = "-";
  return c;
}

// An optional figure's cell: its value where known, "-" where not.
Cell ValueIf(bool known, double v, const char* format) {
  return known ? Value(v, format) : Missing();
}

}  // namespace shoal::report
