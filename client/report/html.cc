#include "client/report/html.h"

#include <set>
#include <sstream>

#include "client/report/svg_chart.h"
#include "shared/report/text.h"
#include "shared/spec/sweep.h"

namespace shoal {
namespace {

std::string Esc(const std::string& s) { return XmlEscape(s); }

constexpr const char* kStyle =
    "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1em}"
    "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}"
    "th{background:#eee}td.label{text-align:left}"
    "td.noisy{background:#fff3cd}td.state{color:#888}"
    "p.note{font-size:90%;color:#555;margin:.2em 0}"
    "figure{margin:1em 0}dl{display:grid;grid-template-columns:max-content auto;gap:2px 1em}"
    "dt{font-weight:bold}dd{margin:0}";

// The picture, without the XML declaration an inline <svg> must not have.
std::string InlineSvg(const std::string& svg) {
  const size_t at = svg.find("<svg");
  return at == std::string::npos ? svg : svg.substr(at);
}

void HtmlTable(std::ostringstream& o, const Table& t) {
  o << "<h3>" << Esc(t.title) << "</h3>\n";
  if (!t.empty_note.empty()) {
    o << "<p class=\"note\">(" << Esc(t.empty_note) << ")</p>\n";
    return;
  }
  if (!t.column_field.empty())
    o << "<p class=\"note\">Columns: " << Esc(t.column_field) << ".</p>\n";
  o << "<table><tr>";
  for (const auto& f : t.row_fields) o << "<th>" << Esc(f) << "</th>";
  for (const auto& c : t.columns) o << "<th>" << Esc(c) << "</th>";
  o << "</tr>\n";
  for (const auto& r : t.rows) {
    o << "<tr>";
    for (const auto& l : r.labels) o << "<td class=\"label\">" << Esc(l) << "</td>";
    for (const auto& c : r.cells) {
      const char* cls = c.noisy ? " class=\"noisy\"" : c.has_value ? "" : " class=\"state\"";
      o << "<td" << cls << ">" << Esc(c.text);
      if (c.footnote) o << " <sup>[" << c.footnote << "]</sup>";
      o << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</table>\n";
  for (size_t i = 0; i < t.footnotes.size(); ++i)
    o << "<p class=\"note\">[" << i + 1 << "] " << Esc(t.footnotes[i]) << "</p>\n";
}

void NodeSection(std::ostringstream& o, const v1::NodeInfoResponse* n) {
  // The daemon that answers now, which need not be the host a run ran on (the records say that:
  // HostsNote, above).
  o << "<h2>Node that answered</h2>\n";
  if (n == nullptr) {
    o << "<p>Not recorded: this report was read from a saved JSON file, not from the daemon "
         "that ran it.</p>\n";
    return;
  }
  o << "<dl><dt>host</dt><dd>" << Esc(n->hostname()) << "</dd>";
  o << "<dt>CPU</dt><dd>" << n->cores() << " cores"
    << (n->cpu_model().empty() ? "" : ", " + Esc(n->cpu_model())) << "</dd>";
  o << "<dt>memory</dt><dd>" << text::Gib(n->memory_total_bytes()) << "</dd>";
  o << "<dt>/dev/shm</dt><dd>" << text::Gib(n->shm_total_bytes()) << "</dd>";
  if (!n->kernel().empty()) o << "<dt>kernel</dt><dd>" << Esc(n->kernel()) << "</dd>";
  for (const auto& g : n->gpus())
    o << "<dt>GPU " << g.index() << "</dt><dd>" << Esc(g.name()) << ", "
      << text::GibIf(g.has_memory_total_bytes(), g.memory_total_bytes()) << ", compute capability "
      << Esc(g.compute_capability()) << "</dd>";
  if (n->gpus().empty()) o << "<dt>GPUs</dt><dd>none (" << Esc(n->gpu_status()) << ")</dd>";
  o << "<dt>device cuda</dt><dd>" << Esc(n->cuda_status()) << "</dd>";
  std::map<std::string, std::string> versions(n->versions().begin(), n->versions().end());
  for (const auto& [k, v] : versions) o << "<dt>" << Esc(k) << "</dt><dd>" << Esc(v) << "</dd>";
  o << "</dl>\n";
}

// What the first run's processes were started with (every run of a sweep has the same).
void EnvironmentSection(std::ostringstream& o, const ReportInput& in) {
  o << "<h2>Environment</h2>\n";
  for (const auto& p : in.sweep.points()) {
    auto it = in.experiments.find(p.experiment_id());
    if (it == in.experiments.end() || it->second.environment().empty()) continue;
    std::map<std::string, std::string> env(it->second.environment().begin(),
                                           it->second.environment().end());
    o << "<p class=\"note\">Of experiment " << Esc(it->first) << ":</p><dl>";
    for (const auto& [k, v] : env) o << "<dt>" << Esc(k) << "</dt><dd>" << Esc(v) << "</dd>";
    o << "</dl>\n";
    return;
  }
  o << "<p>No run recorded one.</p>\n";
}

void Pictures(std::ostringstream& o, const ReportInput& in) {
  o << "<h2>Pictures</h2>\n";
  std::vector<std::string> plots = {"memory", "throughput", "pareto"};
  if (HasGpuFigures(in)) plots.insert(plots.end(), {"gpu-memory", "gpu-util"});
  for (const auto& a : VaryingAxes(in.sweep))
    if (a.field() == "optimizer") plots.push_back("loss");
  for (const auto& p : plots) o << "<figure>" << InlineSvg(RenderSvg(in, p)) << "</figure>\n";
}

}  // namespace

std::string RenderHtml(const ReportInput& in, const v1::NodeInfoResponse* node) {
  std::ostringstream o;
  const auto& s = in.sweep;
  const std::string title =
      "Sweep " + s.id() + (s.spec().name().empty() ? "" : " (" + s.spec().name() + ")");
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << Esc(title)
    << "</title><style>" << kStyle << "</style></head><body>\n<h1>" << Esc(title) << ": "
    << Esc(report::Lower(v1::ExperimentState_Name(s.state()))) << "</h1>\n<p>" << Esc(RunsLine(s))
    << "</p>\n";
  if (const std::string notes = KindNotes(in); !notes.empty()) o << "<p>" << Esc(notes) << "</p>\n";
  if (const std::string hosts = HostsNote(in); !hosts.empty()) o << "<p>" << Esc(hosts) << "</p>\n";
  o << "<h2>Fixed fields</h2>\n<dl>";
  for (const auto& [field, value] : FixedFields(in))
    o << "<dt>" << Esc(field) << "</dt><dd>" << Esc(value) << "</dd>";
  o << "</dl>\n<h2>Tables</h2>\n";
  for (const auto& t : BuildTables(in)) HtmlTable(o, t);
  Pictures(o, in);
  NodeSection(o, node);
  EnvironmentSection(o, in);
  o << "<p class=\"note\">Written by shoal report --format html. Every figure is defined in "
       "Shoal's docs/figures.md; a figure that was not measured is -, never 0.</p>\n"
       "</body></html>\n";
  return o.str();
}

StatusOr<std::string> RenderReport(const ReportInput& in, const std::string& format,
                                   const std::string& plot_asked,
                                   const v1::NodeInfoResponse* node) {
  if (!plot_asked.empty() && format != "svg" && format != "png")
    return InvalidArgument("--plot chooses what svg and png draw; --format is " + format +
                           (format == "html" ? " (which draws every picture)" : ""));
  if (format == "md") return RenderMarkdown(in);
  if (format == "csv") return RenderCsv(in);
  if (format == "json")  // a byte that is not UTF-8 is replaced, never thrown on
    return RenderJson(in).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (format == "html") return RenderHtml(in, node);
  if (format != "svg")
    return InvalidArgument("format: '" + format.substr(0, 20) +
                           "' is not one of md, csv, json, html, svg");
  // An optimiser sweep is drawn as loss curves unless asked otherwise.
  std::string plot = plot_asked;
  if (plot.empty()) {
    plot = "memory";
    for (const auto& ax : VaryingAxes(in.sweep))
      if (ax.field() == "optimizer") plot = "loss";
  }
  static const std::set<std::string> kPlots = {"memory", "gpu-memory", "gpu-util",
                                               "loss",   "throughput", "pareto"};
  if (!kPlots.count(plot))
    return InvalidArgument(
        "plot: '" + plot.substr(0, 20) +
        "' is not one of memory, gpu-memory, gpu-util, loss, throughput, pareto");
  if (plot.rfind("gpu-", 0) == 0 && !HasGpuFigures(in))
    return InvalidArgument("--plot " + plot + ": sweep " + in.sweep.id() +
                           " has no point on a GPU");
  return RenderSvg(in, plot);
}

}  // namespace shoal
