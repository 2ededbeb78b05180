#include "arbench/html_report.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "arbench/chart.hpp"
#include "arbench/cli.hpp"
#include "arbench/compare.hpp"
#include "arbench/files.hpp"
#include "arbench/plot.hpp"
#include "arbench/report.hpp"
#include "arbench/results_file.hpp"
#include "arbench/text.hpp"
#include "arcoll/types.hpp"

namespace arbench {
namespace {

// A JSON value as table text: strings bare, null as "-".
std::string cell(const ResultsJson& v) {
  if (v.is_string()) return markup_escaped(v.get<std::string>());
  if (v.is_null()) return "-";
  if (v.is_number_float()) return printf_string("%.4g", v.get<double>());
  return markup_escaped(v.dump());
}

std::string row_of(const std::vector<std::string>& cells, const char* tag = "td",
                   const std::string& css_class = "") {
  std::string out = css_class.empty() ? "<tr>" : "<tr class=\"" + css_class + "\">";
  for (const std::string& c : cells)
    out.append("<").append(tag).append(">").append(c).append("</").append(tag).append(">");
  return out + "</tr>\n";
}

// Field: value lines of the keys present in `object`.
std::string facts(const ResultsJson& object, const std::vector<const char*>& keys) {
  std::string out = "<table class=\"facts\">\n";
  for (const char* key : keys)
    if (object.contains(key)) out += row_of({markup_escaped(key), cell(object[key])});
  return out + "</table>\n";
}

std::string sweep_section(const ResultsFile& f) {
  const ResultsJson& meta = f.json["metadata"];
  std::string out = "<h2>Sweep: " + markup_escaped(f.path) + "</h2>\n";
  out += facts(meta, {"hostname",       "cpu_model",
                      "cores",          "memory_bytes",
                      "kernel",         "os",
                      "arcoll_version", "git_commit",
                      "transport",      "algorithm",
                      "world_size",     "nodes",
                      "ranks_per_node", "date",
                      "command_line",   "wire",
                      "iters",          "repeat",
                      "chunk_bytes",    "sockets_per_peer",
                      "tcp_congestion", "tcp_congestion_system"});
  out += printf_string("<p>Average bus bandwidth %.3f GB/s; results out of bounds: %s.</p>\n",
                       f.json.value("avg_busbw_gbs", 0.0),
                       cell(f.json.value("out_of_bounds", ResultsJson(nullptr))).c_str());
  out += "<table>\n" + row_of({"size (B)", "type", "op", "backend", "time (us)", "busbw (GB/s)",
                               "in place: time (us)", "busbw (GB/s)", "cv (%)"},
                              "th");
  for (const ResultRow& r : f.rows) {
    const auto cv = std::max(r.out_of_place.cv.value_or(-1), r.in_place.cv.value_or(-1));
    out += row_of({std::to_string(r.size_bytes), markup_escaped(r.type), markup_escaped(r.op),
                   markup_escaped(r.backend), format_time_us(r.out_of_place.time_us),
                   printf_string("%.3f", r.out_of_place.busbw_gbs),
                   format_time_us(r.in_place.time_us), printf_string("%.3f", r.in_place.busbw_gbs),
                   cv < 0 ? "-" : printf_string("%.1f", cv * 100)});
  }
  return out + "</table>\n";
}

std::string comparison_section(const Comparison& c, const std::string& base,
                               const std::string& fresh) {
  std::string out =
      "<h2>" + markup_escaped(fresh) + " against the baseline " + markup_escaped(base) + "</h2>\n";
  out +=
      std::string("<p class=\"") + (c.failed() ? "failed" : "passed") + "\">" +
      (c.failed() ? printf_string("FAILED: %d of %zu row(s) regressed beyond %.1f%%; %zu row(s) "
                                  "of the baseline missing.",
                                  c.regressed, c.rows.size(), c.threshold * 100, c.only_base.size())
                  : printf_string("PASSED: none of %zu row(s) regressed beyond %.1f%%.",
                                  c.rows.size(), c.threshold * 100)) +
      (c.noise_known ? " Noise from --repeat taken into account."
                     : " Noise unknown (no --repeat).") +
      "</p>\n<table>\n" +
      row_of({"size (B)", "type", "op", "backend", "busbw base", "busbw new", "change", "noise",
              "verdict"},
             "th");
  for (const RowChange& r : c.rows)
    out += row_of(
        {std::to_string(r.base.size_bytes), markup_escaped(r.base.type), markup_escaped(r.base.op),
         markup_escaped(r.base.backend), printf_string("%.3f", r.base.out_of_place.busbw_gbs),
         printf_string("%.3f", r.fresh.out_of_place.busbw_gbs),
         printf_string("%+.1f%%", 100 * r.change), printf_string("%.1f%%", 100 * r.noise),
         std::string(verdict_name(r.verdict)) +
             (r.verdict == Verdict::unchanged ? "" : " (" + r.group + ")")},
        "td", r.verdict == Verdict::regressed ? "regressed" : "");
  for (const ResultRow& r : c.only_base)
    out += "<p class=\"failed\">Missing from the new run: " + markup_escaped(r.key()) + "</p>\n";
  for (const ResultRow& r : c.only_new)
    out += "<p>Only in the new run: " + markup_escaped(r.key()) + "</p>\n";
  return out + "</table>\n";
}

std::string replay_section(const ResultsFile& f) {
  const ResultsJson& j = f.json;
  std::string out = "<h2>Replay: " + markup_escaped(f.path) + "</h2>\n";
  out += facts(
      j, {"where", "ranks", "batch_per_rank", "simulated", "link_costs", "iterations", "warmup"});
  if (j.contains("model")) out += facts(j["model"], {"name", "tensors", "parameters"});
  out += "<table>\n" + row_of({"configuration", "iteration (ms)", "predicted (ms)", "compute",
                               "communication", "exposed", "overlap", "samples/s", "error"},
                              "th");
  std::vector<Bar> bars;
  for (const ResultsJson& r : j.value("results", ResultsJson::array())) {
    const ResultsJson& p = r["predicted"];
    const bool measured = r.contains("measured");
    const ResultsJson& m = measured ? r["measured"] : p;
    out +=
        row_of({cell(r["configuration"]), cell(m["iteration_ms"]), cell(p["iteration_ms"]),
                cell(m["compute_ms"]), cell(m["communication_ms"]), cell(m["exposed_ms"]),
                printf_string("%.0f%%", 100 * m.value("overlap", 0.0)), cell(m["samples_per_s"]),
                measured ? printf_string("%+.1f%%", 100 * r.value("prediction_error", 0.0)) : "-"});
    const std::string label = r.value("configuration", "");
    // Where an iteration's time goes: compute, then the communication it could not hide.
    auto bar = [&](const ResultsJson& figures, const std::string& which) {
      bars.push_back({label + which,
                      {{"compute", figures.value("compute_ms", 0.0)},
                       {"exposed communication", figures.value("exposed_ms", 0.0)}}});
    };
    if (measured) bar(m, " (measured)");
    bar(p, " (predicted)");
  }
  out += "</table>\n";
  return out + bar_chart_svg("Iteration time: compute and exposed communication",
                             "milliseconds per iteration", bars);
}

std::string comms_trace_section(const ResultsFile& f) {
  const ResultsJson& j = f.json;
  std::string out = "<h2>Communication trace: " + markup_escaped(f.path) + "</h2>\n";
  out += facts(j, {"trace", "ranks", "hosts", "transport", "mode", "replay_ms", "recorded_ms"});
  out += "<table>\n" + row_of({"collective", "calls", "total bytes", "p50 (us)", "p95 (us)",
                               "max (us)", "sum (ms)"},
                              "th");
  std::vector<Bar> bars;
  for (const ResultsJson& c : j.value("collectives", ResultsJson::array())) {
    out += row_of({cell(c["name"]), cell(c["calls"]), cell(c["total_bytes"]), cell(c["p50_us"]),
                   cell(c["p95_us"]), cell(c["max_us"]), cell(c["sum_ms"])});
    bars.push_back({c.value("name", ""), {{"time in the collective", c.value("sum_ms", 0.0)}}});
  }
  return out + "</table>\n" + bar_chart_svg("Time per collective", "milliseconds", bars);
}

std::string train_section(const ResultsFile& f) {
  const ResultsJson& j = f.json;
  std::string out = "<h2>Training: " + markup_escaped(f.path) + "</h2>\n";
  out += facts(j["metadata"], {"model", "parameters", "data", "ranks", "hosts", "transport",
                               "threads_per_rank", "blas", "torch", "cpu", "cores", "date",
                               "command"});
  out += "<table>\n" + row_of({"backend", "configuration", "iteration p50 (ms)", "p95 (ms)",
                               "samples/s", "scaling", "exposed (ms)", "to target (s)",
                               "accuracy", "CPU user %", "system %", "peak RSS (MiB)",
                               "all-reduced", "predicted (ms)"},
                              "th");
  std::vector<ChartSeries> curves;
  std::vector<Bar> bars;
  auto ms = [](const ResultsJson& seconds) {
    return seconds.is_number() ? printf_string("%.2f", 1e3 * seconds.get<double>()) : "-";
  };
  for (const ResultsJson& r : j.value("runs", ResultsJson::array())) {
    const std::string label = r.value("backend", "") + " " + r["configuration"].value("label", "");
    const ResultsJson& accuracy = r["final_accuracy"];
    out += row_of({cell(r["backend"]), cell(r["configuration"]["label"]), ms(r["iteration_p50_s"]),
                   ms(r["iteration_p95_s"]), cell(r["samples_per_s"]), cell(r["scaling_efficiency"]),
                   ms(r["exposed_communication_s"]), cell(r["time_to_target_s"]),
                   accuracy.is_number() ? printf_string("%.2f%%", 100 * accuracy.get<double>()) : "-",
                   cell(r["cpu_user_percent"]), cell(r["cpu_system_percent"]), cell(r["peak_rss_mib"]),
                   format_bytes(r.value("bytes_allreduced", 0.0)), ms(r["predicted_iteration_s"])});
    ChartSeries curve{label, {}};
    for (const ResultsJson& p : r.value("curve", ResultsJson::array()))
      curve.points.emplace_back(p.value("train_seconds", 0.0), 100 * p.value("accuracy", 0.0));
    if (!curve.points.empty()) curves.push_back(std::move(curve));
    const double iteration = 1e3 * r.value("iteration_p50_s", 0.0);
    const double exposed = 1e3 * r.value("exposed_communication_s", 0.0);
    bars.push_back({label, {{"compute", std::max(0.0, iteration - exposed)},
                            {"exposed communication", exposed}}});
  }
  out += "</table>\n";
  if (!curves.empty())
    out += line_chart_svg("Test accuracy against training time", "test accuracy (%)", curves, false,
                          {.bytes = false, .label = "seconds of training"});
  return out + bar_chart_svg("Iteration time (p50): compute and exposed communication",
                             "milliseconds per iteration", bars);
}

const char* const kStyle = R"(
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } table.facts td { text-align: left; }
tr.regressed td { background: #fdd; } p.failed { color: #b00; font-weight: bold; }
p.passed { color: #070; font-weight: bold; } svg { display: block; margin: 1em 0; }
)";

}  // namespace

int run_report_command(const std::vector<std::string>& inputs, const std::string& baseline,
                       const std::string& threshold, const std::string& output) {
  std::vector<ResultsFile> files;
  std::optional<ResultsFile> base;
  double fraction = 0;
  try {
    fraction = parse_threshold(threshold);
    if (auto error = check_writable("-o/--output", output)) throw UsageError(*error);
    for (const std::string& path : inputs) files.push_back(load_results(path));
    if (!baseline.empty()) {
      base = load_results(baseline);
      if (base->schema != "arcoll.arbench/1")
        throw UsageError("--baseline: " + baseline + " is a " + base->schema +
                         " file, not sweep results");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench report: %s\n", e.what());
    return kUsageError;
  }
  std::vector<ResultsFile> sweeps;
  for (const ResultsFile& f : files)
    if (f.schema == "arcoll.arbench/1") sweeps.push_back(f);
  std::string page =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>arbench report</title>\n<style>" +
      std::string(kStyle) + "</style>\n</head>\n<body>\n<h1>arbench report</h1>\n";
  page += "<p>Made " + markup_escaped(utc_now()) + " by arcoll " +
          markup_escaped(std::string(arcoll::version())) + " from " + std::to_string(files.size()) +
          " file(s).</p>\n";
  if (!sweeps.empty()) {
    std::vector<ResultsFile> charted = sweeps;
    if (base && std::find(inputs.begin(), inputs.end(), base->path) == inputs.end())
      charted.insert(charted.begin(), *base);
    page += "<h2>Bus bandwidth and time against message size</h2>\n" + busbw_chart(charted) +
            time_chart(charted);
  }
  if (base)
    for (const ResultsFile& f : sweeps)
      page += comparison_section(compare_results(*base, f, fraction), base->path, f.path);
  for (const ResultsFile& f : files)
    page += f.schema == "arcoll.arbench/1"   ? sweep_section(f)
            : f.schema == "arbench.replay/1" ? replay_section(f)
            : f.schema == "arbench.train/1"  ? train_section(f)
                                             : comms_trace_section(f);
  page += "</body>\n</html>\n";
  try {
    write_atomically(output, page);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench report: %s\n", e.what());
    return 1;
  }
  print("# report of " + std::to_string(files.size()) + " file(s) written to " + output + "\n");
  return 0;
}

}  // namespace arbench
