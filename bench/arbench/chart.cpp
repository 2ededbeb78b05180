#include "arbench/chart.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "arbench/text.hpp"

namespace arbench {
namespace {

// Plot area inside the SVG, in pixels; the legend goes below it.
constexpr double kWidth = 760, kLeft = 80, kRight = 20, kTop = 40, kPlotHeight = 300;
constexpr double kLegendLine = 18;

// The colour of the i-th series or segment label.
const char* chart_colour(std::size_t i) {
  static const char* const kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                         "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  return kColours[i % (sizeof kColours / sizeof kColours[0])];
}

std::string text_at(double x, double y, const std::string& text, const char* anchor,
                    const char* extra = "") {
  return printf_string("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" %s>%s</text>\n", x, y,
                       anchor, extra, markup_escaped(text).c_str());
}

std::string svg_open(double height, const std::string& title) {
  return printf_string(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
             kWidth, height, kWidth, height) +
         printf_string("<rect width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", kWidth, height) +
         text_at(kWidth / 2, 22, title, "middle", "font-size=\"15\" font-weight=\"bold\"");
}

// The legend: a swatch and a label per entry, one per line below the plot.
std::string legend(const std::vector<std::string>& labels, double top) {
  std::string out;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const double y = top + kLegendLine * static_cast<double>(i);
    out += printf_string("<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n",
                         kLeft, y - 9, chart_colour(i));
    out += text_at(kLeft + 20, y, labels[i], "start");
  }
  return out;
}

// "1", "2.5", "1e+03": short tick labels.
std::string tick_text(double v) {
  return printf_string("%.3g", v);
}

// A round top for a linear axis from 0 to `most`: five steps of 1, 2 or 5 times a power of ten.
double round_top(double most) {
  if (!(most > 0)) return 1;
  const double raw = most * 1.02 / 5, decade = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw <= decade       ? decade
                      : raw <= 2 * decade ? 2 * decade
                      : raw <= 5 * decade ? 5 * decade
                                          : 10 * decade;
  return 5 * step;
}

}  // namespace

std::string markup_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string line_chart_svg(const std::string& title, const std::string& y_label,
                           const std::vector<ChartSeries>& series, bool log_y,
                           const XAxis& x_axis) {
  double x_min = std::numeric_limits<double>::infinity(), x_max = 0;
  double y_min = std::numeric_limits<double>::infinity(), y_max = 0;
  for (const ChartSeries& s : series)
    for (auto [x, y] : s.points) {
      if ((x_axis.bytes && x <= 0) || (log_y && y <= 0)) continue;  // not on a log axis
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, y);
      y_max = std::max(y_max, y);
    }
  const bool empty = !(x_max > 0);
  if (empty) x_min = 1, x_max = 2, y_min = 1, y_max = 2;
  // Whole powers of two (bytes) or a round top (linear) on x, decades (log) or a round top
  // (linear) on y.
  const double lx0 = x_axis.bytes ? std::floor(std::log2(x_min)) : 0,
               lx1 = x_axis.bytes ? std::max(lx0 + 1, std::ceil(std::log2(x_max))) : round_top(x_max);
  double y0 = 0, y1 = round_top(y_max);
  if (log_y) {
    y0 = std::floor(std::log10(y_min));
    y1 = std::max(y0 + 1, std::ceil(std::log10(y_max)));
  }
  const double plot_width = kWidth - kLeft - kRight;
  auto px = [&](double x) {
    return kLeft + ((x_axis.bytes ? std::log2(x) : x) - lx0) / (lx1 - lx0) * plot_width;
  };
  auto py = [&](double y) {
    const double f = log_y ? (std::log10(y) - y0) / (y1 - y0) : (y - y0) / (y1 - y0);
    return kTop + kPlotHeight * (1 - f);
  };
  const double height = kTop + kPlotHeight + 50 + kLegendLine * static_cast<double>(series.size());
  std::string out = svg_open(height, title);
  out += printf_string(
      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
      "stroke=\"#444\"/>\n",
      kLeft, kTop, plot_width, kPlotHeight);
  // x ticks: every power of two, labelled every other step when crowded; or five steps.
  const int steps = x_axis.bytes ? static_cast<int>(lx1 - lx0) : 5;
  const int label_every = std::max(1, steps / 12 + 1);
  for (int i = 0; i <= steps; ++i) {
    const double x = x_axis.bytes ? std::exp2(lx0 + i) : lx1 * i / steps;
    const double at = px(x);
    out +=
        printf_string("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                      at, kTop, at, kTop + kPlotHeight);
    if (i % label_every == 0)
      out += text_at(at, kTop + kPlotHeight + 16, x_axis.bytes ? format_bytes(x) : tick_text(x),
                     "middle");
  }
  // y ticks: decades, or five steps.
  const int y_steps = log_y ? static_cast<int>(y1 - y0) : 5;
  for (int i = 0; i <= y_steps; ++i) {
    const double y = log_y ? std::pow(10.0, y0 + i) : y0 + (y1 - y0) * i / y_steps;
    const double at = py(y);
    out +=
        printf_string("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                      kLeft, at, kLeft + plot_width, at);
    out += text_at(kLeft - 6, at + 4, tick_text(y), "end");
  }
  out += text_at(kLeft + plot_width / 2, kTop + kPlotHeight + 34, x_axis.label, "middle");
  out += printf_string(
      "<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\">%s</text>\n",
      kTop + kPlotHeight / 2, markup_escaped(y_label + (log_y ? " (log scale)" : "")).c_str());
  if (empty) out += text_at(kLeft + plot_width / 2, kTop + kPlotHeight / 2, "no data", "middle");
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < series.size(); ++i) {
    std::string path;
    for (auto [x, y] : series[i].points) {
      if ((x_axis.bytes && x <= 0) || (log_y && y <= 0)) continue;
      path += printf_string("%s%.1f,%.1f", path.empty() ? "" : " ", px(x), py(y));
      out += printf_string("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", px(x), py(y),
                           chart_colour(i));
    }
    if (!path.empty())
      out += printf_string(
          "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n",
          path.c_str(), chart_colour(i));
    labels.push_back(series[i].label);
  }
  out += legend(labels, kTop + kPlotHeight + 60);
  return out + "</svg>\n";
}

std::string bar_chart_svg(const std::string& title, const std::string& x_label,
                          const std::vector<Bar>& bars) {
  constexpr double kBar = 22, kGap = 8, kLabels = 260;
  std::vector<std::string> names;  // segment labels in order of first use
  double longest = 0;
  for (const Bar& b : bars) {
    double total = 0;
    for (const BarSegment& s : b.segments) {
      total += s.value;
      if (std::find(names.begin(), names.end(), s.label) == names.end()) names.push_back(s.label);
    }
    longest = std::max(longest, total);
  }
  if (!(longest > 0)) longest = 1;
  const double plot_left = kLabels, plot_width = kWidth - kLabels - kRight;
  const double plot_height = static_cast<double>(bars.size()) * (kBar + kGap) + kGap;
  const double height = kTop + plot_height + 50 + kLegendLine * static_cast<double>(names.size());
  std::string out = svg_open(height, title);
  for (int i = 0; i <= 5; ++i) {
    const double v = longest * 1.05 * i / 5, at = plot_left + plot_width * i / 5;
    out +=
        printf_string("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                      at, kTop, at, kTop + plot_height);
    out += text_at(at, kTop + plot_height + 16, tick_text(v), "middle");
  }
  out += text_at(plot_left + plot_width / 2, kTop + plot_height + 34, x_label, "middle");
  for (std::size_t b = 0; b < bars.size(); ++b) {
    const double y = kTop + kGap + static_cast<double>(b) * (kBar + kGap);
    out += text_at(plot_left - 6, y + kBar * 0.7, bars[b].label, "end");
    double x = plot_left;
    for (const BarSegment& s : bars[b].segments) {
      const double w = s.value / (longest * 1.05) * plot_width;
      const auto colour =
          static_cast<std::size_t>(std::find(names.begin(), names.end(), s.label) - names.begin());
      out += printf_string(
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s: "
          "%.3g</title></rect>\n",
          x, y, std::max(0.0, w), kBar, chart_colour(colour), markup_escaped(s.label).c_str(),
          s.value);
      x += w;
    }
  }
  out += legend(names, kTop + plot_height + 60);
  return out + "</svg>\n";
}

}  // namespace arbench
