#include "arbench/comms_trace_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "arbench/files.hpp"
#include "arbench/replay_command.hpp"
#include "arbench/text.hpp"
#include "replay/comms_trace.hpp"

namespace arbench {
namespace {

namespace rp = arcoll::replay;
using Json = nlohmann::ordered_json;

// Bytes a call moves through each rank's larger buffer (a gather's output, a scatter's input).
double call_bytes(const rp::TraceCall& c, int ranks) {
  const double block = static_cast<double>(c.count * arcoll::size_of(c.type));
  switch (c.op) {
    case rp::TraceOp::allgather:
    case rp::TraceOp::reduce_scatter:
    case rp::TraceOp::gather:
    case rp::TraceOp::scatter:
    case rp::TraceOp::alltoall:
      return block * ranks;
    case rp::TraceOp::barrier:
      return 0;
    default:
      return block;
  }
}

// Latency statistics of one collective name, in order of first appearance.
struct Group {
  std::string name;
  std::vector<double> latencies;  // seconds, each the slowest rank's
  double min_bytes = 0, max_bytes = 0, total_bytes = 0;
};

std::vector<Group> group_calls(const rp::CommsTrace& trace, const std::vector<double>& latencies,
                               int ranks) {
  std::vector<Group> groups;
  for (std::size_t i = 0; i < trace.calls.size(); ++i) {
    const rp::TraceCall& c = trace.calls[i];
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const Group& x) { return x.name == c.name; });
    const double bytes = call_bytes(c, ranks);
    if (g == groups.end()) {
      groups.push_back({c.name, {}, bytes, bytes, 0});
      g = groups.end() - 1;
    }
    g->latencies.push_back(latencies[i]);
    g->min_bytes = std::min(g->min_bytes, bytes);
    g->max_bytes = std::max(g->max_bytes, bytes);
    g->total_bytes += bytes;
  }
  return groups;
}

double sum(const std::vector<double>& values) {
  double total = 0;
  for (double v : values) total += v;
  return total;
}

int replay_trace(arcoll::Communicator& comm, const ReplayFlags& flags) {
  // Every rank reads its own file; all learn whether every rank could, so that one bad file
  // fails the job at once instead of leaving the others waiting.
  rp::CommsTrace trace;
  std::string error;
  const std::string file = rp::comms_trace_file(flags.comms_trace, comm.rank());
  try {
    trace = rp::load_comms_trace(file, comm.size());
    if (!flags.back_to_back)
      for (std::size_t i = 0; i < trace.calls.size(); ++i)
        if (!trace.calls[i].start_ns)
          throw std::runtime_error("comms trace " + file + ": call " + std::to_string(i) + " (" +
                                   trace.calls[i].name +
                                   ") has no startTime_ns: replay it --back-to-back");
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::int64_t agreed[3] = {error.empty() ? 0 : 1, static_cast<std::int64_t>(trace.calls.size()),
                            -static_cast<std::int64_t>(trace.calls.size())};
  comm.allreduce(agreed, 3, arcoll::DataType::i64, arcoll::ReduceOp::max);
  if (agreed[0] != 0) {
    if (!error.empty()) std::fprintf(stderr, "arbench replay: %s\n", error.c_str());
    return kUsageError;
  }
  if (agreed[1] != -agreed[2]) {
    if (comm.rank() == 0)
      std::fprintf(stderr,
                   "arbench replay: the ranks' traces hold different numbers of collectives "
                   "(%lld to %lld): they were not recorded in one job\n",
                   static_cast<long long>(-agreed[2]), static_cast<long long>(agreed[1]));
    return kUsageError;
  }

  const auto start = std::chrono::steady_clock::now();
  std::vector<double> lateness;
  std::vector<double> latencies = rp::run_comms_trace(comm, trace, !flags.back_to_back, &lateness);
  const double replay_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A collective takes as long as its slowest rank.
  comm.allreduce(latencies.data(), latencies.size(), arcoll::DataType::f64, arcoll::ReduceOp::max);
  if (!lateness.empty())
    comm.allreduce(lateness.data(), lateness.size(), arcoll::DataType::f64, arcoll::ReduceOp::max);
  if (comm.rank() != 0) return 0;

  const std::vector<Group> groups = group_calls(trace, latencies, comm.size());
  const double recorded =
      flags.back_to_back || trace.calls.empty()
          ? 0
          : static_cast<double>(*trace.calls.back().start_ns - *trace.calls.front().start_ns) *
                1e-9;
  std::string skipped;
  for (const auto& [reason, count] : trace.skipped)
    skipped += (skipped.empty() ? "" : "; ") + std::to_string(count) + " " + reason;
  std::string text = printf_string(
      "# arbench replay --comms-trace %s: %d ranks on %d host(s), %s; %zu calls per rank, %s\n",
      flags.comms_trace.c_str(), comm.size(), comm.node_count(), comm.transport_name().c_str(),
      trace.calls.size(),
      flags.back_to_back ? "back to back" : "each at its recorded offset from the first");
  if (!skipped.empty()) text += "# left out: " + skipped + "\n";
  text += printf_string("# %-16s %7s %21s %12s %10s %10s %10s %10s\n", "collective", "calls",
                        "bytes per call", "total", "p50 (us)", "p95 (us)", "max (us)", "sum (ms)");
  for (const Group& g : groups)
    text += printf_string(
        "  %-16s %7zu %21s %12s %10.1f %10.1f %10.1f %10.2f\n", g.name.c_str(), g.latencies.size(),
        (format_bytes(g.min_bytes) + ".." + format_bytes(g.max_bytes)).c_str(),
        format_bytes(g.total_bytes).c_str(), quantile(g.latencies, 0.5) * 1e6,
        quantile(g.latencies, 0.95) * 1e6,
        *std::max_element(g.latencies.begin(), g.latencies.end()) * 1e6, sum(g.latencies) * 1e3);
  text += printf_string("# replay took %.2f ms, %.2f ms of it in collectives", replay_seconds * 1e3,
                        sum(latencies) * 1e3);
  if (!flags.back_to_back)
    text += printf_string(
        "; the recording spans %.2f ms; calls started late by %.1f us (p50), %.1f us (max)",
        recorded * 1e3, quantile(lateness, 0.5) * 1e6,
        lateness.empty() ? 0.0 : *std::max_element(lateness.begin(), lateness.end()) * 1e6);
  print(text + "\n");

  if (!flags.json.empty()) {
    Json collectives = Json::array();
    for (const Group& g : groups)
      collectives.push_back(
          {{"name", g.name},
           {"calls", g.latencies.size()},
           {"min_bytes", g.min_bytes},
           {"max_bytes", g.max_bytes},
           {"total_bytes", g.total_bytes},
           {"p50_us", quantile(g.latencies, 0.5) * 1e6},
           {"p95_us", quantile(g.latencies, 0.95) * 1e6},
           {"max_us", *std::max_element(g.latencies.begin(), g.latencies.end()) * 1e6},
           {"sum_ms", sum(g.latencies) * 1e3}});
    Json calls = Json::array();
    for (std::size_t i = 0; i < trace.calls.size(); ++i)
      calls.push_back({{"name", trace.calls[i].name},
                       {"bytes", call_bytes(trace.calls[i], comm.size())},
                       {"latency_us", latencies[i] * 1e6}});
    Json left_out = Json::object();
    for (const auto& [reason, count] : trace.skipped) left_out[reason] = count;
    const Json j = {{"schema", "arbench.comms-trace/1"},
                    {"trace", flags.comms_trace},
                    {"ranks", comm.size()},
                    {"hosts", comm.node_count()},
                    {"transport", comm.transport_name()},
                    {"mode", flags.back_to_back ? "back-to-back" : "time-faithful"},
                    {"replay_ms", replay_seconds * 1e3},
                    {"recorded_ms", flags.back_to_back ? Json(nullptr) : Json(recorded * 1e3)},
                    {"left_out", left_out},
                    {"collectives", collectives},
                    {"calls", calls}};
    write_atomically(flags.json, j.dump(2) + "\n");
    print("# results written to " + flags.json + "\n");
  }
  return 0;
}

}  // namespace

int run_comms_trace_command(const ToolFlags& tool, const ReplayFlags& flags) {
  return run_tool(
      "replay", tool, 1, 4,
      [&]() -> std::optional<std::string> {
        if (flags.sweep || flags.simulate || !flags.trace.empty())
          return "--comms-trace replays the recorded calls: --sweep, --simulate and --trace "
                 "are for models";
        if (!flags.json.empty()) return check_writable("--json", flags.json);
        return std::nullopt;
      },
      [&](arcoll::Communicator& comm) { return replay_trace(comm, flags); });
}

}  // namespace arbench
