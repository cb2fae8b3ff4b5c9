#include "client/report/timeline.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "client/report/svg_chart.h"

namespace shoal {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The series names in order of first appearance, and each sample's PSS per series.
struct Columns {
  std::vector<std::string> names;
  std::vector<std::map<std::string, double>> pss_mib;  // one map per sample
};

// "node 1 " for a sample of a run across nodes, "" otherwise.
std::string NodePrefix(const v1::Sample& s) {
  return s.has_node() ? "node " + std::to_string(s.node()) + " " : "";
}

bool AnyNode(const std::vector<v1::Sample>& samples) {
  return std::any_of(samples.begin(), samples.end(),
                     [](const v1::Sample& s) { return s.has_node(); });
}

Columns Split(const std::vector<v1::Sample>& samples) {
  Columns c;
  for (const auto& s : samples) {
    auto& row = c.pss_mib.emplace_back();
    for (const auto& p : s.processes()) {
      const std::string name = NodePrefix(s) + TimelineSeriesName(p);
      if (std::find(c.names.begin(), c.names.end(), name) == c.names.end()) c.names.push_back(name);
      row[name] += double(p.pss_bytes()) / kMiB;
    }
  }
  return c;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string TextRow(const std::vector<std::string>& cells, bool md) {
  std::string out = md ? "| " : "";
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) out += md ? " | " : ",";
    out += cells[i];
  }
  return out + (md ? " |\n" : "\n");
}

}  // namespace

std::string TimelineSeriesName(const v1::ProcessSample& p) {
  if (p.role() == "worker") return "worker " + std::to_string(p.index());
  return p.role();
}

std::string FormatTimeline(const std::vector<v1::Sample>& samples, const std::string& format) {
  const bool md = format != "csv";
  const Columns c = Split(samples);
  const bool nodes = AnyNode(samples);
  std::vector<std::string> head = {"t_s", "total_pss_mib", "total_rss_mib", "total_uss_mib"};
  if (nodes) head.insert(head.begin() + 1, "node");
  for (const auto& n : c.names) head.push_back(n + " pss_mib");
  std::string out = TextRow(head, md);
  if (md) out += TextRow(std::vector<std::string>(head.size(), "---"), true);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    std::vector<std::string> cells = {Number(s.t_ms() / 1000), Number(s.total_pss_bytes() / kMiB),
                                      Number(s.total_rss_bytes() / kMiB),
                                      Number(s.total_uss_bytes() / kMiB)};
    if (nodes) cells.insert(cells.begin() + 1, s.has_node() ? std::to_string(s.node()) : "");
    for (const auto& n : c.names) {
      auto it = c.pss_mib[i].find(n);
      cells.push_back(it == c.pss_mib[i].end() ? "" : Number(it->second));
    }
    out += TextRow(cells, md);
  }
  return out;
}

std::string RenderTimelineSvg(const std::string& title, const std::vector<v1::Sample>& samples) {
  const Columns c = Split(samples);
  LineChart chart{title, "seconds since start", "PSS (MiB)", {}, {}};
  std::vector<Series> totals;  // one per node (a run across nodes), else one
  for (const auto& s : samples) {
    const std::string name = NodePrefix(s) + "total";
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const Series& t) { return t.label == name; });
    if (it == totals.end()) it = totals.insert(totals.end(), Series{name, /*dashed=*/true, {}});
    it->points.emplace_back(s.t_ms() / 1000, s.total_pss_bytes() / kMiB);
  }
  for (auto& t : totals) chart.series.push_back(std::move(t));
  for (const auto& n : c.names) {
    Series one{n, false, {}};
    for (size_t i = 0; i < samples.size(); ++i)
      if (auto it = c.pss_mib[i].find(n); it != c.pss_mib[i].end())
        one.points.emplace_back(samples[i].t_ms() / 1000, it->second);
    chart.series.push_back(std::move(one));
  }
  return RenderLineChart(chart);
}

}  // namespace shoal
