#include "arbench/plot.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "arbench/chart.hpp"
#include "arbench/cli.hpp"
#include "arbench/files.hpp"
#include "arbench/text.hpp"

namespace arbench {
namespace {

std::string stem(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.size() > 5 && name.substr(name.size() - 5) == ".json") name.resize(name.size() - 5);
  return name;
}

// One series per file and row series, in order of first appearance; `value` picks the figure.
template <typename Value>
std::vector<ChartSeries> sweep_series(const std::vector<ResultsFile>& files, Value value) {
  std::vector<ChartSeries> series;
  for (const ResultsFile& f : files)
    for (const ResultRow& r : f.rows) {
      const std::string label = (files.size() > 1 ? stem(f.path) + ": " : "") + r.series();
      auto s = std::find_if(series.begin(), series.end(),
                            [&](const ChartSeries& x) { return x.label == label; });
      if (s == series.end()) {
        series.push_back({label, {}});
        s = series.end() - 1;
      }
      s->points.emplace_back(static_cast<double>(r.size_bytes), value(r));
    }
  return series;
}

// Both charts one above the other in one SVG.
std::string stacked(const std::string& top, const std::string& bottom) {
  auto height_of = [](const std::string& svg) {
    const std::size_t at = svg.find("height=\"") + 8;
    return std::atof(svg.c_str() + at);
  };
  const double h1 = height_of(top), h2 = height_of(bottom);
  auto placed = [](const std::string& svg, double y) {
    return "<svg y=\"" + printf_string("%.0f", y) + "\"" + svg.substr(4);
  };
  return printf_string(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"%.0f\" "
             "viewBox=\"0 0 760 %.0f\">\n",
             h1 + h2, h1 + h2) +
         placed(top, 0) + placed(bottom, h1) + "</svg>\n";
}

bool ends_with(const std::string& text, const std::string& end) {
  return text.size() >= end.size() && text.compare(text.size() - end.size(), end.size(), end) == 0;
}

}  // namespace

std::string busbw_chart(const std::vector<ResultsFile>& files) {
  return line_chart_svg(
      "Bus bandwidth", "busbw (GB/s)",
      sweep_series(files, [](const ResultRow& r) { return r.out_of_place.busbw_gbs; }), false);
}

std::string time_chart(const std::vector<ResultsFile>& files) {
  return line_chart_svg(
      "Time per all-reduce", "time (us)",
      sweep_series(files, [](const ResultRow& r) { return r.out_of_place.time_us; }), true);
}

int run_plot_command(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<ResultsFile> files;
  std::optional<std::string> converter;
  try {
    const bool png = ends_with(output, ".png");
    if (!png && !ends_with(output, ".svg"))
      throw UsageError("-o/--output: " + quoted(output) + " must end in .svg or .png");
    if (png && !(converter = find_on_path("rsvg-convert")))
      throw UsageError(
          "-o/--output: PNG needs rsvg-convert (Debian package librsvg2-bin); an "
          ".svg needs nothing");
    if (auto error = check_writable("-o/--output", output)) throw UsageError(*error);
    for (const std::string& path : inputs) {
      files.push_back(load_results(path));
      if (files.back().schema != "arcoll.arbench/1")
        throw UsageError(path + ": a " + files.back().schema +
                         " file: plot draws sweeps (arbench --json); arbench report shows replays");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench plot: %s\n", e.what());
    return kUsageError;
  }
  const std::string svg = stacked(busbw_chart(files), time_chart(files));
  try {
    if (!converter) {
      write_atomically(output, svg);
    } else {
      const std::string source = output + ".svg.tmp";
      write_atomically(source, svg);
      const pid_t child = ::fork();
      if (child == 0) {
        ::execl(converter->c_str(), "rsvg-convert", "-o", output.c_str(), source.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
      }
      int status = 0;
      if (child > 0) ::waitpid(child, &status, 0);
      std::remove(source.c_str());
      if (child < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw std::runtime_error(*converter + " could not write " + output);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench plot: %s\n", e.what());
    return 1;
  }
  print("# plot of " + std::to_string(files.size()) + " file(s) written to " + output + "\n");
  return 0;
}

}  // namespace arbench
