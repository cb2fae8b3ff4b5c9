#include "shared/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "shared/pbjson.h"

namespace shoal {
namespace {

std::string Fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

struct MetricDef {
  const char* key;
  const char* title;
  const char* format;
  bool gpu;
  double (*get)(const v1::Result&);
};

const MetricDef kMetrics[] = {
    {"host_memory_gib", "Host memory: peak sum of PSS over all processes (GiB)", "%.2f", false,
     [](const v1::Result& r) { return double(r.peak_pss_sum_bytes()) / double(1ull << 30); }},
    {"gpu_memory_gib", "GPU memory: peak (GiB)", "%.2f", true, nullptr},
    {"gpu_util_percent", "GPU utilisation: mean during training (%)", "%.0f", true, nullptr},
    {"samples_per_sec", "Throughput (samples/s, all workers)", "%.1f", false,
     [](const v1::Result& r) { return r.samples_per_sec(); }},
    {"ready_ms", "Time to ready (ms, first request -> every worker training)", "%.0f", false,
     [](const v1::Result& r) { return r.start_ms(); }},
};

std::vector<uint32_t> Columns(const v1::Sweep& s) {
  std::vector<uint32_t> cols;
  for (const auto& p : s.points())
    if (std::find(cols.begin(), cols.end(), p.workers()) == cols.end()) cols.push_back(p.workers());
  return cols;
}

}  // namespace

std::vector<Table> BuildTables(const ReportInput& in) {
  const auto cols = Columns(in.sweep);
  std::vector<Table> tables;
  for (const auto& m : kMetrics) {
    Table t;
    t.key = m.key;
    t.title = m.title;
    t.columns = cols;
    for (const auto& p : in.sweep.points()) {
      // CPU rows have no GPU figures: the GPU tables list GPU rows only, as the study's do.
      if (m.gpu && p.device() == "cpu") continue;
      auto it = std::find_if(t.rows.begin(), t.rows.end(), [&](const Row& r) {
        return r.start == p.start() && r.share == p.share() && r.device == p.device();
      });
      if (it == t.rows.end()) {
        t.rows.push_back({p.start(), p.device(), p.share(), std::vector<Cell>(cols.size())});
        it = std::prev(t.rows.end());
      }
      Cell& c = it->cells[std::find(cols.begin(), cols.end(), p.workers()) - cols.begin()];
      if (!p.note().empty()) {
        c.text = p.note().rfind("impossible", 0) == 0 ? "-" : "n/a";
        auto f = std::find(t.footnotes.begin(), t.footnotes.end(), p.note());
        if (f == t.footnotes.end()) f = t.footnotes.insert(t.footnotes.end(), p.note());
        c.footnote = static_cast<int>(f - t.footnotes.begin()) + 1;
        continue;
      }
      auto e = in.experiments.find(p.experiment_id());
      if (e == in.experiments.end()) {
        c.text = Lower(v1::ExperimentState_Name(p.state()));
        continue;
      }
      if (e->second.state() != v1::SUCCEEDED) {
        c.text = Lower(v1::ExperimentState_Name(e->second.state()));
        continue;
      }
      if (m.get == nullptr) {  // a GPU figure of an experiment that ran: not measured by this build
        c.text = "n/a";
        continue;
      }
      c.has_value = true;
      c.value = m.get(e->second.result());
      c.text = Fmt(m.format, c.value);
    }
    if (t.rows.empty()) t.empty_note = "no GPU points in this sweep (--device cpu only)";
    tables.push_back(std::move(t));
  }
  return tables;
}

std::string RenderMarkdown(const ReportInput& in) {
  std::ostringstream o;
  const auto& s = in.sweep;
  o << "# Sweep " << s.id() << (s.spec().name().empty() ? "" : " (" + s.spec().name() + ")") << ": "
    << Lower(v1::ExperimentState_Name(s.state())) << "\n\n";
  const auto& b = s.spec().base();
  o << b.kind() << " " << b.model() << ", batch " << b.batch_size() << " x " << b.batches()
    << " per worker, dataset " << b.dataset() << "\n";
  for (const auto& t : BuildTables(in)) {
    o << "\n## " << t.title << "\n\n";
    if (!t.empty_note.empty()) {
      o << "(" << t.empty_note << ")\n";
      continue;
    }
    o << "| start | share | device |";
    for (uint32_t c : t.columns) o << " " << c << " |";
    o << "\n| --- | --- | --- |";
    for (size_t i = 0; i < t.columns.size(); ++i) o << " --- |";
    o << "\n";
    for (const auto& r : t.rows) {
      o << "| " << r.start << " | " << (r.share ? "yes" : "no") << " | "
        << (r.device == "cpu" ? "CPU" : "GPU") << " |";
      for (const auto& c : r.cells) {
        o << " " << (c.text.empty() ? " " : c.text);
        if (c.footnote) o << " [" << c.footnote << "]";
        o << " |";
      }
      o << "\n";
    }
    for (size_t i = 0; i < t.footnotes.size(); ++i)
      o << "\n[" << i + 1 << "] " << t.footnotes[i] << "\n";
  }
  return o.str();
}

namespace {

std::string CsvField(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string JsonScalar(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    return buf;
  }
  return v.dump();
}

}  // namespace

std::string RenderCsv(const ReportInput& in) {
  // Every field of Result, by reflection, so a new figure shows up without touching this.
  const nlohmann::json result_fields = ToJson(v1::Result());
  std::ostringstream o;
  o << "sweep_id,index,workers,start,share,device,note,experiment_id,state,error,threads,batch_"
       "size,batches";
  for (auto it = result_fields.begin(); it != result_fields.end(); ++it) o << "," << it.key();
  o << "\n";
  for (const auto& p : in.sweep.points()) {
    auto e = in.experiments.find(p.experiment_id());
    const v1::Experiment* ex = e == in.experiments.end() ? nullptr : &e->second;
    o << in.sweep.id() << "," << p.index() << "," << p.workers() << "," << p.start() << ","
      << (p.share() ? "yes" : "no") << "," << p.device() << "," << CsvField(p.note()) << ","
      << p.experiment_id() << "," << (ex ? Lower(v1::ExperimentState_Name(ex->state())) : "") << ","
      << CsvField(ex ? ex->error() : "") << "," << (ex ? std::to_string(ex->spec().threads()) : "")
      << "," << (ex ? std::to_string(ex->spec().batch_size()) : "") << ","
      << (ex ? std::to_string(ex->spec().batches()) : "");
    const nlohmann::json r = ex ? ToJson(ex->result()) : nlohmann::json::object();
    for (auto it = result_fields.begin(); it != result_fields.end(); ++it) {
      o << "," << (ex ? CsvField(JsonScalar(r[it.key()])) : "");
    }
    o << "\n";
  }
  return o.str();
}

nlohmann::json RenderJson(const ReportInput& in) {
  nlohmann::json j;
  j["sweep"] = ToJson(in.sweep);
  j["experiments"] = nlohmann::json::array();
  for (const auto& p : in.sweep.points()) {
    auto e = in.experiments.find(p.experiment_id());
    if (e != in.experiments.end()) j["experiments"].push_back(ToJson(e->second));
  }
  j["tables"] = nlohmann::json::array();
  for (const auto& t : BuildTables(in)) {
    nlohmann::json jt = {
        {"key", t.key}, {"title", t.title}, {"columns", t.columns}, {"footnotes", t.footnotes}};
    jt["rows"] = nlohmann::json::array();
    for (const auto& r : t.rows) {
      nlohmann::json cells = nlohmann::json::array();
      for (const auto& c : r.cells) {
        cells.push_back({{"value", c.has_value ? nlohmann::json(c.value) : nlohmann::json()},
                         {"text", c.text},
                         {"footnote", c.footnote}});
      }
      jt["rows"].push_back(
          {{"start", r.start}, {"share", r.share}, {"device", r.device}, {"cells", cells}});
    }
    if (!t.empty_note.empty()) jt["empty_note"] = t.empty_note;
    j["tables"].push_back(jt);
  }
  return j;
}

namespace {

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

}  // namespace

std::string RenderSvg(const ReportInput& in) {
  const Table t = BuildTables(in)[0];  // host memory
  const double W = 860, H = 460, left = 70, right = 300, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double ymax = 0;
  for (const auto& r : t.rows)
    for (const auto& c : r.cells)
      if (c.has_value) ymax = std::max(ymax, c.value);
  // A round axis top: 1, 2 or 5 times a power of ten, above the largest value.
  double step = std::pow(10.0, std::floor(std::log10(std::max(ymax, 0.01) / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (ymax / (step * m) <= 5) {
      step *= m;
      break;
    }
  }
  const double ytop = std::max(step, std::ceil(ymax / step) * step);
  const size_t n = std::max<size_t>(1, t.columns.size());
  auto x_of = [&](size_t i) { return left + (n == 1 ? pw / 2 : pw * double(i) / double(n - 1)); };
  auto y_of = [&](double v) { return top + ph - ph * v / ytop; };
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">"
    << XmlEscape("Peak host memory (sum of PSS) by worker count — sweep " + in.sweep.id())
    << "</text>\n";
  // Axes, grid and labels.
  o << "<line x1=\"" << left << "\" y1=\"" << top + ph << "\" x2=\"" << left + pw << "\" y2=\""
    << top + ph << "\" stroke=\"black\"/>\n<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\""
    << left << "\" y2=\"" << top + ph << "\" stroke=\"black\"/>\n";
  for (double v = 0; v <= ytop + 1e-9; v += step) {
    o << "<line x1=\"" << left << "\" y1=\"" << y_of(v) << "\" x2=\"" << left + pw << "\" y2=\""
      << y_of(v) << "\" stroke=\"#dddddd\"/>\n<text x=\"" << left - 8 << "\" y=\"" << y_of(v) + 4
      << "\" text-anchor=\"end\">" << Fmt(step < 1 ? "%.1f" : "%.0f", v) << "</text>\n";
  }
  for (size_t i = 0; i < t.columns.size(); ++i) {
    o << "<text x=\"" << x_of(i) << "\" y=\"" << top + ph + 18 << "\" text-anchor=\"middle\">"
      << t.columns[i] << "</text>\n";
  }
  o << "<text x=\"" << left + pw / 2 << "\" y=\"" << H - 18
    << "\" text-anchor=\"middle\">worker processes</text>\n"
    << "<text x=\"18\" y=\"" << top + ph / 2
    << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " << top + ph / 2
    << ")\">host memory, GiB (sum of PSS)</text>\n";
  // One polyline per row that has data, and a legend entry for every row.
  size_t k = 0;
  for (const auto& r : t.rows) {
    const std::string color = kColors[k % 10];
    const std::string label = r.start + ", share " + (r.share ? "yes" : "no") + ", " +
                              (r.device == "cpu" ? "CPU" : "GPU");
    std::ostringstream pts;
    bool any = false;
    for (size_t i = 0; i < r.cells.size(); ++i) {
      if (!r.cells[i].has_value) continue;
      pts << (any ? " " : "") << x_of(i) << "," << y_of(r.cells[i].value);
      any = true;
    }
    if (any) {
      // Rows that coincide (shared or not often do) stay apart: not shared is dashed.
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\""
        << (r.share ? "" : " stroke-dasharray=\"7,4\"") << " points=\"" << pts.str() << "\">"
        << "<title>" << XmlEscape(label) << "</title></polyline>\n";
      for (size_t i = 0; i < r.cells.size(); ++i) {
        if (r.cells[i].has_value) {
          o << "<circle cx=\"" << x_of(i) << "\" cy=\"" << y_of(r.cells[i].value)
            << "\" r=\"3\" fill=\"" << color << "\"/>\n";
        }
      }
    }
    const double ly = top + 10 + 20 * double(k);
    o << "<line x1=\"" << left + pw + 20 << "\" y1=\"" << ly << "\" x2=\"" << left + pw + 44
      << "\" y2=\"" << ly << "\" stroke=\"" << color << "\" stroke-width=\"2\""
      << (!any      ? " stroke-dasharray=\"2,3\""
          : r.share ? ""
                    : " stroke-dasharray=\"7,4\"")
      << "/>\n"
      << "<text x=\"" << left + pw + 50 << "\" y=\"" << ly + 4 << "\">"
      << XmlEscape(label + (any ? "" : " (no data)")) << "</text>\n";
    ++k;
  }
  o << "</svg>\n";
  return o.str();
}

std::string RenderCompareMarkdown(const ReportInput& a, const ReportInput& b) {
  const auto ta = BuildTables(a), tb = BuildTables(b);
  std::ostringstream o;
  o << "# Sweep " << b.sweep.id() << " / sweep " << a.sweep.id() << " (ratio of each cell)\n";
  for (size_t k = 0; k < ta.size(); ++k) {
    const Table& x = ta[k];
    const Table& y = tb[k];
    if (x.rows.empty()) continue;
    o << "\n## " << x.title << "\n\n| start | share | device |";
    for (uint32_t c : x.columns) o << " " << c << " |";
    o << "\n| --- | --- | --- |";
    for (size_t i = 0; i < x.columns.size(); ++i) o << " --- |";
    o << "\n";
    for (const auto& r : x.rows) {
      o << "| " << r.start << " | " << (r.share ? "yes" : "no") << " | "
        << (r.device == "cpu" ? "CPU" : "GPU") << " |";
      auto other = std::find_if(y.rows.begin(), y.rows.end(), [&](const Row& q) {
        return q.start == r.start && q.share == r.share && q.device == r.device;
      });
      for (size_t i = 0; i < x.columns.size(); ++i) {
        std::string text = "-";
        auto col = std::find(y.columns.begin(), y.columns.end(), x.columns[i]);
        if (other != y.rows.end() && col != y.columns.end()) {
          const Cell& cb = other->cells[col - y.columns.begin()];
          const Cell& ca = r.cells[i];
          if (ca.has_value && cb.has_value && ca.value != 0)
            text = Fmt("%.2f", cb.value / ca.value);
        }
        o << " " << text << " |";
      }
      o << "\n";
    }
  }
  return o.str();
}

}  // namespace shoal
