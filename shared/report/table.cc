#include "shared/report/table.h"

#include <algorithm>
#include <cctype>
#include <cmath>
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

std::vector<const v1::Experiment*> CountedRuns(const PointView& v) {
  std::vector<const v1::Experiment*> ok, calm;
  for (const v1::Experiment* e : v.runs) {
    if (e == nullptr || e->state() != v1::SUCCEEDED) continue;
    ok.push_back(e);
    if (!e->result().disturbed()) calm.push_back(e);
  }
  return calm.empty() ? ok : calm;
}

namespace {

double Median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

// Why a cell has no figure: its skip note, or the state of its (representative) run.
Cell StateCell(const PointView& v, Table& t) {
  Cell c;
  const auto& p = *v.point;
  if (!p.note().empty()) {
    c.text = p.note().rfind("impossible", 0) == 0 ? "-"
             : p.note().rfind("skipped", 0) == 0  ? "skipped"
                                                  : "n/a";
    c.footnote = Footnote(t, p.note());
    return c;
  }
  c.text = Lower(v1::ExperimentState_Name(v.experiment ? v.experiment->state() : p.state()));
  return c;
}

// "a, b" when the runs' records name more than one host (name and CPU model); "" when one.
std::string UnlikeHosts(const std::vector<const v1::Experiment*>& runs) {
  std::vector<std::string> names;
  const v1::Host* first = nullptr;
  bool unlike = false;
  for (const v1::Experiment* e : runs) {
    if (!e->has_host()) continue;
    const v1::Host& h = e->host();
    if (first == nullptr) first = &h;
    unlike = unlike || !SameHost(h, *first);
    if (std::find(names.begin(), names.end(), h.hostname()) == names.end())
      names.push_back(h.hostname());
  }
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return unlike ? out : "";
}

}  // namespace

bool SameHost(const v1::Host& a, const v1::Host& b) {
  return a.hostname() == b.hostname() && a.cpu_model() == b.cpu_model();
}

Cell Summarize(const std::vector<Cell>& cells, const PointView& v, Table& t) {
  if (cells.empty()) return Missing();
  const auto counted = CountedRuns(v);
  const bool disturbed =
      !counted.empty() && std::all_of(counted.begin(), counted.end(),
                                      [](const auto* e) { return e->result().disturbed(); });
  if (v.repeats <= 1) {
    Cell c = cells[0];
    if (disturbed) c.footnote = Footnote(t, "disturbed: " + counted[0]->result().disturbance());
    return c;
  }
  std::vector<double> xs;
  for (const Cell& c : cells) xs.push_back(c.value);
  const char* format = cells[0].format ? cells[0].format : "%.4g";
  Cell out = Value(Median(xs), format);
  out.ratio = cells[0].ratio;
  out.runs = int(xs.size());
  out.lo = *std::min_element(xs.begin(), xs.end());
  out.hi = *std::max_element(xs.begin(), xs.end());
  out.noisy = out.hi - out.lo > kNoisySpread * std::fabs(out.value);
  if (out.runs > 1) out.text += " (" + Fmt(format, out.lo) + "\u2013" + Fmt(format, out.hi) + ")";
  std::string note;
  if (size_t(out.runs) < v.repeats)
    note = "median of " + std::to_string(out.runs) + " of " + std::to_string(v.repeats) +
           " runs: the others failed, were skipped or disturbed, or have no figure";
  if (out.noisy)
    note += std::string(note.empty() ? "" : "; ") + "noisy: its runs spread over more than " +
            Fmt("%.0f", kNoisySpread * 100) + "% of their median";
  if (disturbed) note += std::string(note.empty() ? "" : "; ") + "every run was disturbed";
  if (const std::string hosts = UnlikeHosts(counted); !hosts.empty())
    note += std::string(note.empty() ? "" : "; ") + "its runs ran on unlike hosts (" + hosts +
            "): the median mixes them";
  if (!note.empty()) out.footnote = Footnote(t, note);
  return out;
}

Cell PointCell(const PointView& v, Table& t, bool gpu, const Getter& get, const char* format) {
  if (!v.point->note().empty()) return StateCell(v, t);
  const auto counted = CountedRuns(v);
  if (counted.empty()) return StateCell(v, t);
  std::vector<Cell> cells;
  for (const v1::Experiment* e : counted)
    if (auto value = get(e->result())) cells.push_back(Value(*value, format));
  if (cells.empty()) {
    Cell c = Missing();
    const std::string& why = counted[0]->result().gpu_status();
    if (gpu && !why.empty()) c.footnote = Footnote(t, why);
    return c;
  }
  return Summarize(cells, v, t);
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
    const auto counted = CountedRuns(v);
    const Cell state = counted.empty() || !v.point->note().empty() ? StateCell(v, t) : Cell{};
    for (size_t k = 0; k < t.columns.size() && state.text.empty(); ++k) {
      std::vector<Cell> cells;
      for (const v1::Experiment* e : counted)
        if (Cell c = cell(*e, k); c.has_value) cells.push_back(c);
      // None has a figure: the representative run's own "-" (or text) says so.
      r.cells[k] = cells.empty() ? cell(*counted[0], k) : Summarize(cells, v, t);
    }
    if (!state.text.empty()) std::fill(r.cells.begin(), r.cells.end(), state);
    t.rows.push_back(std::move(r));
  }
  return t;
}

Cell Value(double v, const char* format) {
  Cell c;
  c.format = format;
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
