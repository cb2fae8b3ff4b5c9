// A small SVG line chart: labelled axes with round ticks, one polyline per series (dashed on
// request), and a legend beside the plot that names every series, with "(no data)" for empty ones.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace shoal {

struct Series {
  std::string label;
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  // (x, y)
  bool markers_only = false;                      // a scatter: its points, not joined
  std::vector<std::string> labels = {};           // beside each point, when given (one per point)
  // A range per point (min, max of its repeated runs), drawn as a bar through it; empty: none.
  std::vector<std::pair<double, double>> ranges = {};
};

struct LineChart {
  std::string title, x_label, y_label;
  // Categorical x: ticks at these positions with these labels. Empty: a numeric axis from 0.
  std::vector<std::pair<double, std::string>> x_ticks;
  std::vector<Series> series;
};

std::string RenderLineChart(const LineChart& c);
// `s` safe inside XML or HTML text and attribute values: < > & " escaped.
std::string XmlEscape(const std::string& s);

}  // namespace shoal
