// Charts as SVG text, with nothing to fetch: a line chart against message size (log scale)
// for sweeps, and stacked horizontal bars for replay breakdowns.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace arbench {

struct ChartSeries {
  std::string label;
  std::vector<std::pair<double, double>> points;  // (x, y): x in bytes on the default axis
};

// The x axis: message sizes on a log-2 axis labelled "8 B", "1 KiB", ... (sweeps), or a linear
// one from 0 (time, for training curves).
struct XAxis {
  bool bytes = true;
  std::string label = "message size (bytes, log scale)";
};

// y linear from 0, or logarithmic.
std::string line_chart_svg(const std::string& title, const std::string& y_label,
                           const std::vector<ChartSeries>& series, bool log_y,
                           const XAxis& x_axis = {});

struct BarSegment {
  std::string label;  // legend entry; segments with the same label share a colour
  double value = 0;
};
struct Bar {
  std::string label;
  std::vector<BarSegment> segments;  // stacked left to right
};

std::string bar_chart_svg(const std::string& title, const std::string& x_label,
                          const std::vector<Bar>& bars);

// `text` with &, <, > and " escaped, for SVG and HTML.
std::string markup_escaped(const std::string& text);

}  // namespace arbench
