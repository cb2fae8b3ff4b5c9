#include "client/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace shoal {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A round step (1, 2 or 5 times a power of ten) giving at most five intervals up to vmax.
double RoundStep(double vmax) {
  double step = std::pow(10.0, std::floor(std::log10(std::max(vmax, 1e-9) / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (vmax / (step * m) <= 5) return step * m;
  }
  return step * 10;
}

struct Frame {
  double W = 880, H = 460, left = 70, right = 320, top = 50, bottom = 60;
  double xmin = 0, xmax = 1, ytop = 1, ystep = 1;
  double pw() const { return W - left - right; }
  double ph() const { return H - top - bottom; }
  double X(double x) const {
    return xmax == xmin ? left + pw() / 2 : left + pw() * (x - xmin) / (xmax - xmin);
  }
  double Y(double y) const { return top + ph() - ph() * y / ytop; }
};

Frame MakeFrame(const LineChart& c) {
  Frame f;
  double ymax = 0, xmax = 0;
  for (const auto& s : c.series) {
    for (const auto& [x, y] : s.points) {
      ymax = std::max(ymax, y);
      xmax = std::max(xmax, x);
    }
    for (const auto& [lo, hi] : s.ranges) ymax = std::max(ymax, hi);  // a bar stays in the frame
  }
  f.ystep = RoundStep(std::max(ymax, 0.01));
  f.ytop = std::max(f.ystep, std::ceil(ymax / f.ystep) * f.ystep);
  if (!c.x_ticks.empty()) {
    f.xmin = c.x_ticks.front().first;
    f.xmax = c.x_ticks.back().first;
  } else {
    f.xmax = std::max(1.0, xmax);
  }
  return f;
}

void Axes(std::ostringstream& o, const LineChart& c, const Frame& f) {
  o << "<line x1=\"" << f.left << "\" y1=\"" << f.top + f.ph() << "\" x2=\"" << f.left + f.pw()
    << "\" y2=\"" << f.top + f.ph() << "\" stroke=\"black\"/>\n<line x1=\"" << f.left << "\" y1=\""
    << f.top << "\" x2=\"" << f.left << "\" y2=\"" << f.top + f.ph() << "\" stroke=\"black\"/>\n";
  for (double v = 0; v <= f.ytop + 1e-9; v += f.ystep) {
    o << "<line x1=\"" << f.left << "\" y1=\"" << f.Y(v) << "\" x2=\"" << f.left + f.pw()
      << "\" y2=\"" << f.Y(v) << "\" stroke=\"#dddddd\"/>\n<text x=\"" << f.left - 8 << "\" y=\""
      << f.Y(v) + 4 << "\" text-anchor=\"end\">" << Num(v) << "</text>\n";
  }
  std::vector<std::pair<double, std::string>> ticks = c.x_ticks;
  if (ticks.empty()) {
    const double step = RoundStep(f.xmax);
    for (double x = 0; x <= f.xmax + 1e-9; x += step) ticks.push_back({x, Num(x)});
  }
  for (const auto& [x, label] : ticks) {
    o << "<text x=\"" << f.X(x) << "\" y=\"" << f.top + f.ph() + 18 << "\" text-anchor=\"middle\">"
      << XmlEscape(label) << "</text>\n";
  }
  o << "<text x=\"" << f.left + f.pw() / 2 << "\" y=\"" << f.H - 18 << "\" text-anchor=\"middle\">"
    << XmlEscape(c.x_label) << "</text>\n"
    << "<text x=\"18\" y=\"" << f.top + f.ph() / 2
    << "\" text-anchor=\"middle\" transform=\"rotate(-90 18 " << f.top + f.ph() / 2 << ")\">"
    << XmlEscape(c.y_label) << "</text>\n";
}

// A scatter series: a ringed dot per point, its label beside it.
void Markers(std::ostringstream& o, const Series& s, const Frame& f, const std::string& color) {
  for (size_t i = 0; i < s.points.size(); ++i) {
    const auto& [x, y] = s.points[i];
    o << "<circle cx=\"" << f.X(x) << "\" cy=\"" << f.Y(y) << "\" r=\"5\" fill=\"" << color
      << "\" stroke=\"black\" stroke-width=\"0.5\"><title>" << XmlEscape(s.label)
      << "</title></circle>\n";
    if (i < s.labels.size())
      o << "<text x=\"" << f.X(x) + 7 << "\" y=\"" << f.Y(y) - 6 << "\" font-size=\"10\">"
        << XmlEscape(s.labels[i]) << "</text>\n";
  }
}

void Lines(std::ostringstream& o, const LineChart& c, const Frame& f) {
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  size_t k = 0;
  for (const auto& s : c.series) {
    const std::string color = kColors[k % 10];
    const char* dash = s.dashed ? " stroke-dasharray=\"7,4\"" : "";
    if (s.markers_only) {
      Markers(o, s, f, color);
    } else if (!s.points.empty()) {
      std::ostringstream pts;
      for (const auto& [x, y] : s.points) pts << f.X(x) << "," << f.Y(y) << " ";
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\"" << dash
        << " points=\"" << pts.str() << "\"><title>" << XmlEscape(s.label)
        << "</title></polyline>\n";
      for (size_t i = 0; i < s.ranges.size() && i < s.points.size(); ++i) {
        const double x = f.X(s.points[i].first);
        o << "<line x1=\"" << x << "\" y1=\"" << f.Y(s.ranges[i].first) << "\" x2=\"" << x
          << "\" y2=\"" << f.Y(s.ranges[i].second) << "\" stroke=\"" << color
          << "\" stroke-width=\"1\"><title>" << XmlEscape(s.label) << ": " << Num(s.ranges[i].first)
          << "\u2013" << Num(s.ranges[i].second) << "</title></line>\n";
      }
      if (s.points.size() <= 32) {
        for (const auto& [x, y] : s.points)
          o << "<circle cx=\"" << f.X(x) << "\" cy=\"" << f.Y(y) << "\" r=\"3\" fill=\"" << color
            << "\"/>\n";
      }
    }
    const double ly = f.top + 10 + 20 * double(k);
    o << "<line x1=\"" << f.left + f.pw() + 20 << "\" y1=\"" << ly << "\" x2=\""
      << f.left + f.pw() + 44 << "\" y2=\"" << ly << "\" stroke=\"" << color
      << "\" stroke-width=\"2\"" << (s.points.empty() ? " stroke-dasharray=\"2,3\"" : dash)
      << "/>\n<text x=\"" << f.left + f.pw() + 50 << "\" y=\"" << ly + 4 << "\">"
      << XmlEscape(s.label + (s.points.empty() ? " (no data)" : "")) << "</text>\n";
    ++k;
  }
}

}  // namespace

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

std::string RenderLineChart(const LineChart& c) {
  Frame f = MakeFrame(c);
  f.H = std::max(f.H, f.top + 20 + 20 * double(c.series.size()));  // room for every legend line
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << f.W << "\" height=\"" << f.H
    << "\" viewBox=\"0 0 " << f.W << " " << f.H
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << f.left << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">"
    << XmlEscape(c.title) << "</text>\n";
  Axes(o, c, f);
  Lines(o, c, f);
  o << "</svg>\n";
  return o.str();
}

}  // namespace shoal
