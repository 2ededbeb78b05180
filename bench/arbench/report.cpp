#include "arbench/report.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "arbench/collectives.hpp"
#include "arbench/text.hpp"

namespace arbench {
namespace {

using json = nlohmann::ordered_json;  // keys in the documented order

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::vector<std::string> type_names(const SweepSettings& sweep) {
  std::vector<std::string> names;
  for (auto type : sweep.types) names.emplace_back(arcoll::to_string(type));
  return names;
}

std::vector<std::string> op_names(const SweepSettings& sweep) {
  std::vector<std::string> names;
  for (auto op : sweep.ops) names.emplace_back(arcoll::to_string(op));
  return names;
}

// nccl-tests' redop column: the operator, "none" for collectives that do not reduce.
std::string op_text(const Row& row) {
  return reduces(row.coll) ? std::string(arcoll::to_string(row.op)) : "none";
}

std::string colls_text(const SweepSettings& sweep) {
  std::vector<std::string> names;
  for (Coll coll : sweep.colls) names.emplace_back(to_string(coll));
  return join(names, ", ");
}

std::string wrong_text(const GroupResult& g) {
  return g.wrong ? std::to_string(*g.wrong) : std::string("N/A");
}

// Shortest text that reads back as the same double.
std::string exact_number(double value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc() ? std::string(buffer, end) : std::string("nan");
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

template <typename T>
json optional_json(const std::optional<T>& value) {
  return value ? json(*value) : json(nullptr);
}

json group_json(const GroupResult& g) {
  json j = {{"time_us", g.time_us},
            {"algbw_gbs", g.algbw_gbs},
            {"busbw_gbs", g.busbw_gbs},
            {"iters", g.iters},
            {"wrong", optional_json(g.wrong)}};
  if (g.max_abs_error) {
    j["max_abs_error"] = *g.max_abs_error;
    j["max_rel_error"] = optional_json(g.max_rel_error);
  }
  if (g.spread)
    j["spread"] = {{"repeats", g.spread->count},       {"min_us", g.spread->min_us},
                   {"median_us", g.spread->median_us}, {"max_us", g.spread->max_us},
                   {"p99_us", g.spread->p99_us},       {"cv", g.spread->cv},
                   {"passes_us", g.spread->passes_us}};
  return j;
}

// "  maxabs  maxrel" over both groups of a row rounded by the wire; empty otherwise.
std::string wire_error_text(const Row& row) {
  if (!row.out_of_place.max_abs_error || !row.in_place.max_abs_error) return "";
  return printf_string(
      "  %8.2e  %8.2e", std::max(*row.out_of_place.max_abs_error, *row.in_place.max_abs_error),
      std::max(row.out_of_place.max_rel_error.value_or(0), row.in_place.max_rel_error.value_or(0)));
}

// "20", "auto (50 ms per size and group, at least 5)", or with passes "auto (10 ms per size and
// group in each of 5 passes, at least 5 in all)".
std::string iters_text(const SweepSettings& sweep) {
  if (sweep.target_seconds <= 0) return std::to_string(sweep.iters);
  if (sweep.repeat > 1)
    return printf_string(
        "auto (%.0f ms per size and group in each of %d passes, at least %d in all)",
        sweep.target_seconds * 1e3, sweep.repeat,
        min_auto_iters_per_pass(sweep.repeat) * sweep.repeat);
  return printf_string("auto (%.0f ms per size and group, at least %d)", sweep.target_seconds * 1e3,
                       kMinAutoIters);
}

// A busbw ratio of two backends at a size (out of place, or in place), and whether their
// passes disagree on it by more than kNoisyRatio.
struct Ratio {
  std::size_t size_bytes = 0;
  double value = 0;
  bool noisy = false;
  std::optional<double> earlier;  // an earlier run's ratio more than kNoisyRatio away
};

// Whether two ratios of the same thing disagree by more than kNoisyRatio.
bool far_apart(double a, double b) { return std::max(a, b) / std::min(a, b) > 1 + kNoisyRatio; }

// The earlier ratio of `peer` and `coll` at `r`'s size farthest from `r`, when it is far apart.
std::optional<double> moved_from(const Ratio& r, const std::string& peer, Coll coll,
                                 const std::vector<KeptRatio>& earlier) {
  std::optional<double> farthest;
  auto distance = [&](double e) { return std::abs(std::log(e / r.value)); };
  for (const KeptRatio& e : earlier)
    if (e.peer == peer && e.coll == to_string(coll) && e.size_bytes == r.size_bytes &&
        far_apart(e.value, r.value) && (!farthest || distance(e.value) > distance(*farthest)))
      farthest = e.value;
  return farthest;
}

// Which of a row's two timings a ratio compares.
using Placement = GroupResult Row::*;
constexpr Placement kOutOfPlace = &Row::out_of_place;
constexpr Placement kInPlace = &Row::in_place;

// `mine`'s busbw over `theirs`', from their medians; noisy when, pass by pass (the backends
// take turns within a pass, so a phase of the host weighs on both), the ratios' interquartile
// range exceeds kNoisyRatio of their lower quartile.
Ratio ratio_of(const Row& mine, const Row& theirs, Placement placement) {
  const GroupResult& m = mine.*placement;
  const GroupResult& t = theirs.*placement;
  Ratio r{mine.size_bytes, m.busbw_gbs / t.busbw_gbs, false, std::nullopt};
  const auto& a = m.spread;
  const auto& b = t.spread;
  if (!a || !b || a->passes_us.size() != b->passes_us.size() || a->passes_us.size() < 2) return r;
  std::vector<double> passes;
  for (std::size_t i = 0; i < a->passes_us.size(); ++i)
    if (a->passes_us[i] > 0) passes.push_back(b->passes_us[i] / a->passes_us[i]);
  const double low = quantile(passes, 0.25);
  r.noisy = low > 0 && quantile(passes, 0.75) / low > 1 + kNoisyRatio;
  return r;
}

// The ratios of `first` over `peer` at each size of the rows of `kind`'s collective, type and
// operator, in size order; those out of place marked where they moved from `earlier`'s.
std::vector<Ratio> versus_ratios(const std::string& first, const BackendInfo& peer,
                                 const std::vector<Row>& rows, const Row& kind,
                                 const std::vector<KeptRatio>& earlier, Placement placement) {
  std::vector<Ratio> ratios;
  for (const Row& mine : rows) {
    if (mine.backend != first || mine.coll != kind.coll || mine.type != kind.type ||
        mine.op != kind.op)
      continue;
    for (const Row& theirs : rows)
      if (theirs.backend == peer.name && theirs.coll == mine.coll && theirs.type == mine.type &&
          theirs.op == mine.op && theirs.size_bytes == mine.size_bytes &&
          (theirs.*placement).busbw_gbs > 0 && (mine.*placement).busbw_gbs > 0)
        ratios.push_back(ratio_of(mine, theirs, placement));
  }
  if (placement == kOutOfPlace)
    for (Ratio& r : ratios) r.earlier = moved_from(r, peer.name, kind.coll, earlier);
  return ratios;
}

std::string ratio_at(const Ratio& r) {
  std::string marks = r.noisy ? " (noisy)" : "";
  if (r.earlier) marks += printf_string(" (moved: x%.2f in an earlier run)", *r.earlier);
  return printf_string("x%.2f at %s%s", r.value,
                       format_bytes(static_cast<double>(r.size_bytes)).c_str(), marks.c_str());
}

// The first row of `first` of each collective, in table order.
std::vector<const Row*> first_row_of_each_collective(const std::string& first,
                                                     const std::vector<Row>& rows) {
  std::vector<const Row*> kinds;
  for (const Row& row : rows)
    if (row.backend == first &&
        std::none_of(kinds.begin(), kinds.end(), [&](const Row* k) { return k->coll == row.coll; }))
      kinds.push_back(&row);
  return kinds;
}

// What the footer under the summary lines must explain.
struct FooterNotes {
  bool noisy = false;          // a ratio given is noisy
  bool moved = false;          // a ratio given moved from `earlier`'s
  bool rooted_behind = false;  // a rooted collective fell below a peer at some size
};

// "# arcoll vs gloo: x1.52 at 8 B, x2.10 at 128 MiB; lowest x0.91 at 2 MiB" (busbw, out of
// place), a line per collective of the table (the first type and operator of each, its name
// after "vs gloo" when there are several), then the lowest of them all, named; against a
// collective library, the same lines in place follow ("# arcoll vs gloo, in place: ..."):
// frameworks reduce their gradients in place, where a library may take another path. Against a
// reference (memcpy, the ceiling), which bounds large sizes only: the largest size, out of
// place. Sets in `notes` what the footer must explain.
std::string versus_lines(const std::string& first, const BackendInfo& peer,
                         const std::vector<Row>& rows, const std::vector<KeptRatio>& earlier,
                         FooterNotes& notes) {
  auto at = [&](const Ratio& r) {
    notes.noisy = notes.noisy || r.noisy;
    notes.moved = notes.moved || r.earlier.has_value();
    return ratio_at(r);
  };
  const std::vector<const Row*> kinds = first_row_of_each_collective(first, rows);
  std::string out;
  for (const Placement placement : {kOutOfPlace, kInPlace}) {
    if (placement == kInPlace && !peer.reduces) break;
    const std::string vs = "# " + first + " vs " + peer.name;
    const std::string where = placement == kInPlace ? ", in place" : "";
    Ratio lowest_of_all{0, std::numeric_limits<double>::infinity(), false, std::nullopt};
    const Row* lowest_kind = nullptr;
    for (const Row* kind : kinds) {
      const auto ratios = versus_ratios(first, peer, rows, *kind, earlier, placement);
      if (ratios.empty()) continue;
      const std::string head =
          vs + (kinds.size() > 1 ? ", " + std::string(to_string(kind->coll)) : "") + where;
      if (!peer.reduces) {
        out += head + ": " + at(ratios.back()) + " (busbw ratio)\n";
        continue;
      }
      const Ratio lowest =
          *std::min_element(ratios.begin(), ratios.end(),
                            [](const Ratio& a, const Ratio& b) { return a.value < b.value; });
      out += head + ": " + at(ratios.front());
      if (ratios.size() > 1) out += ", " + at(ratios.back()) + "; lowest " + at(lowest);
      out += " (busbw ratio)\n";
      notes.rooted_behind = notes.rooted_behind || (rooted(kind->coll) && lowest.value < 1);
      if (lowest.value < lowest_of_all.value) {
        lowest_of_all = lowest;
        lowest_kind = kind;
      }
    }
    if (lowest_kind != nullptr && kinds.size() > 1)
      out += vs + where + ": lowest " + at(lowest_of_all) + " in " +
             std::string(to_string(lowest_kind->coll)) + "\n";
  }
  return out;
}

}  // namespace

Summary summarize(const std::vector<Row>& rows) {
  Summary summary;
  double total = 0;
  for (const Row& row : rows)
    for (const GroupResult* g : {&row.out_of_place, &row.in_place}) {
      total += g->busbw_gbs;
      if (g->wrong && *g->wrong > 0) ++summary.out_of_bounds;
    }
  if (!rows.empty()) summary.avg_busbw_gbs = total / static_cast<double>(2 * rows.size());
  return summary;
}

Summary summarize(const std::vector<Row>& rows, const std::string& backend) {
  std::vector<Row> mine;
  for (const Row& row : rows)
    if (row.backend == backend) mine.push_back(row);
  return summarize(mine);
}

std::string format_time_us(double us) {
  if (us >= 10000.0) return printf_string("%7.0f", us);
  if (us >= 100.0) return printf_string("%7.1f", us);
  return printf_string("%7.2f", us);
}

std::string table_header(const RunInfo& info) {
  std::string out;
  out += printf_string("# arbench %s (arcoll git %s): %s\n", info.arcoll_version.c_str(),
                       info.git_commit.c_str(), colls_text(info.sweep).c_str());
  const bool by_factor = info.step_factor.has_value();
  out += printf_string(
      "# minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %s validation: %d\n",
      info.min_bytes, info.max_bytes, by_factor ? *info.step_factor : info.step_bytes.value_or(0),
      by_factor ? "factor" : "bytes", info.sweep.warmup_iters, iters_text(info.sweep).c_str(),
      info.sweep.check ? 1 : 0);
  out += printf_string("# datatype %s  redop %s\n", join(type_names(info.sweep), ",").c_str(),
                       join(op_names(info.sweep), ",").c_str());
  const std::string per_host = info.ranks_per_node
                                   ? std::to_string(*info.ranks_per_node) + " rank(s) per host"
                                   : std::string("ranks per host vary");
  out += printf_string("# world size %d on %d host(s), %s\n", info.world_size, info.nodes,
                       per_host.c_str());
  out += printf_string(
      "# transport %s  algorithm %s  chunk %zu B  sockets per peer %d  timeout %g s  buffers %s\n",
      info.transport.c_str(), info.algorithm.c_str(), info.chunk_bytes, info.sockets_per_peer,
      info.timeout_s,
      info.sweep.device != "host" ? ("arcoll's on " + info.sweep.device + " devices").c_str()
      : info.sweep.shared_buffers ? "arcoll's from mem_alloc"
                                  : "heap");
  if (info.transport.find("tcp") != std::string::npos)
    out += printf_string("# tcp congestion control %s (ARCOLL_TCP_CONGESTION), the system's %s\n",
                         info.tcp_congestion.c_str(), info.host.tcp_congestion.c_str());
  if (!info.link_costs.empty()) out += "# cost model: " + info.link_costs + "\n";
  const bool wire = info.sweep.wire != arcoll::DataType::f32;
  if (wire)
    out += printf_string(
        "# wire %s: f32 carried as %s, accumulated in f32; f32 rows but prod use reals the wire "
        "rounds: #wrong counts errors beyond (2p+1) u S (u: the wire's unit roundoff, S: sum of "
        "the inputs' magnitudes); maxabs, maxrel: the largest error, absolute and over S\n",
        std::string(arcoll::to_string(info.sweep.wire)).c_str(),
        std::string(arcoll::to_string(info.sweep.wire)).c_str());
  // arcoll alone keeps nccl-tests' header; other backends say what ran.
  const bool arcoll_only = info.backends.size() == 1 && info.backends.front().name == "arcoll";
  if (!info.backends.empty() && !arcoll_only)
    for (const BackendInfo& b : info.backends)
      out += printf_string("# backend %s: %s\n", b.name.c_str(), b.description.c_str());
  out += printf_string("# host %s: %s, %d cores, %s memory, kernel %s, %s\n",
                       info.host.hostname.c_str(), info.host.cpu_model.c_str(), info.host.cores,
                       format_bytes(static_cast<double>(info.host.memory_bytes)).c_str(),
                       info.host.kernel.c_str(), info.host.os.c_str());
  out += "#\n# Using ranks\n";
  for (const RankPlace& r : info.ranks)
    out += printf_string("#  Rank %2d Pid %6ld on %10s node %2d local rank %2d\n", r.rank, r.pid,
                         r.host.c_str(), r.node, r.local_rank);
  out += "#\n";
  if (info.compare) return out + compare_header(info);
  if (info.algorithms) return out + algorithms_header(wire);
  // nccl-tests' three header lines, character for character.
  out += printf_string(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
      "\n",
      "", "", "", "", "");
  out += printf_string("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s%s\n",
                       "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                       "time", "algbw", "busbw", "#wrong", wire ? "    maxabs    maxrel" : "",
                       info.sweep.repeat > 1 ? "  cv(%)" : "");
  out += printf_string("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n",
                       "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                       "(GB/s)", "(GB/s)", "");
  return out;
}

std::string table_row(const Row& row) {
  std::string out = printf_string("%12zu  %12zu  %8s  %6s  %6d", row.size_bytes, row.count,
                                  std::string(arcoll::to_string(row.type)).c_str(),
                                  op_text(row).c_str(), row.root);
  for (const GroupResult* g : {&row.out_of_place, &row.in_place})
    out += printf_string("  %7s  %6.2f  %6.2f  %5s", format_time_us(g->time_us).c_str(),
                         g->algbw_gbs, g->busbw_gbs, wrong_text(*g).c_str());
  out += wire_error_text(row);
  // --repeat: the noisier group's coefficient of variation over the repetitions.
  if (row.out_of_place.spread && row.in_place.spread)
    out += printf_string("  %5.1f",
                         100 * std::max(row.out_of_place.spread->cv, row.in_place.spread->cv));
  return out + "\n";
}

std::string algorithms_header(bool wire) {
  return printf_string("# %10s  %12s  %6s  %6s  %-20s  %9s  %9s  %7s  %7s  %6s%s\n", "size",
                       "count", "type", "redop", "algorithm", "predicted", "measured", "error",
                       "busbw", "#wrong", wire ? "    maxabs    maxrel" : "") +
         printf_string("# %10s  %12s  %6s  %6s  %-20s  %9s  %9s  %7s  %7s  %6s\n", "(B)",
                       "(elements)", "", "", "", "(us)", "(us)", "", "(GB/s)", "") +
         "# measured: out of place; error: (predicted - measured) / measured; auto: the "
         "algorithm the model chose\n";
}

std::string algorithms_row(const Row& row) {
  std::string algorithm = row.backend.substr(row.backend.find('/') + 1);
  if (!row.predicted_algorithm.empty()) algorithm += "=" + row.predicted_algorithm;
  const double measured = row.out_of_place.time_us;
  std::string error = "-";
  std::string predicted = "-";
  if (row.predicted_us) {
    predicted = format_time_us(*row.predicted_us);
    if (measured > 0)
      error = printf_string("%+6.0f%%", (*row.predicted_us - measured) / measured * 100);
  }
  std::string wrong = "N/A";
  if (row.out_of_place.wrong && row.in_place.wrong)
    wrong = std::to_string(*row.out_of_place.wrong + *row.in_place.wrong);
  return printf_string("%12zu  %12zu  %6s  %6s  %-20s  %9s  %9s  %7s  %7.2f  %6s", row.size_bytes,
                       row.count, std::string(arcoll::to_string(row.type)).c_str(),
                       op_text(row).c_str(), algorithm.c_str(), predicted.c_str(),
                       format_time_us(measured).c_str(), error.c_str(), row.out_of_place.busbw_gbs,
                       wrong.c_str()) +
         wire_error_text(row) + "\n";
}

std::string table_footer(const Summary& summary) {
  return printf_string("# Out of bounds values : %d %s\n# Avg bus bandwidth    : %g\n#\n",
                       summary.out_of_bounds, summary.out_of_bounds != 0 ? "FAILED" : "OK",
                       summary.avg_busbw_gbs);
}

std::string compare_header(const RunInfo& info) {
  std::string line1 = printf_string("# %10s  %12s  %6s  %6s", "", "", "", "");
  std::string line2 = printf_string("# %10s  %12s  %6s  %6s", "size", "count", "type", "redop");
  std::string line3 = printf_string("# %10s  %12s  %6s  %6s", "(B)", "(elements)", "", "");
  for (std::size_t i = 0; i < info.backends.size(); ++i) {
    const bool ratio = i > 0;
    const int width = ratio ? 49 : 27;
    line1 += printf_string(" | %-*s", width, info.backends[i].name.c_str());
    line2 += printf_string(" | %9s  %7s  %6s", "time", "busbw", "#wrong");
    line3 += printf_string(" | %9s  %7s  %6s", "(us)", "(GB/s)", "");
    if (ratio) {
      line2 += printf_string("  %9s  %9s", "ratio", "in place");
      line3 += printf_string("  %9s  %9s", "", "ratio");
    }
  }
  const std::string first = info.backends.empty() ? "arcoll" : info.backends.front().name;
  std::string out = "# out-of-place time and busbw";
  if (info.sweep.repeat > 1)
    out += printf_string(" (medians of %d passes, the backends in turn at each size)",
                         info.sweep.repeat);
  out += "; #wrong of both groups; ratio: " + first +
         " busbw / that backend's busbw, and the same\n"
         "#   of the calls in place (what frameworks run), whose times are in the JSON";
  if (info.sweep.repeat > 1)
    out += printf_string(
        "; ?: noisy, the passes' ratios spread by more than %.0f%% (interquartile range)",
        kNoisyRatio * 100);
  return out + "\n" + line1 + "\n" + line2 + "\n" + line3 + "\n";
}

std::string compare_row(const RunInfo& info, const std::vector<Row>& rows) {
  if (rows.empty()) return "";
  const Row& first = rows.front();
  std::string out =
      printf_string("%12zu  %12zu  %6s  %6s", first.size_bytes, first.count,
                    std::string(arcoll::to_string(first.type)).c_str(), op_text(first).c_str());
  const Row* reference = nullptr;
  for (std::size_t i = 0; i < info.backends.size(); ++i) {
    const Row* row = nullptr;
    for (const Row& r : rows)
      if (r.backend == info.backends[i].name) row = &r;
    if (i == 0) reference = row;
    if (row == nullptr) {
      out += printf_string(" | %9s  %7s  %6s", "-", "-", "-");
    } else {
      std::string wrong = "N/A";
      if (row->out_of_place.wrong && row->in_place.wrong)
        wrong = std::to_string(*row->out_of_place.wrong + *row->in_place.wrong);
      out += printf_string(" | %9s  %7.2f  %6s", format_time_us(row->out_of_place.time_us).c_str(),
                           row->out_of_place.busbw_gbs, wrong.c_str());
    }
    if (i > 0)
      for (const Placement placement : {kOutOfPlace, kInPlace}) {
        // A reference (memcpy, the ceiling) bounds the call, wherever its result goes.
        const bool compared = placement == kOutOfPlace || info.backends[i].reduces;
        std::string ratio = "-";
        if (compared && row != nullptr && reference != nullptr && (row->*placement).busbw_gbs > 0 &&
            (reference->*placement).busbw_gbs > 0) {
          const Ratio r = ratio_of(*reference, *row, placement);
          ratio = printf_string("x%.2f%s", r.value, r.noisy ? "?" : "");
        }
        out += printf_string("  %9s", ratio.c_str());
      }
  }
  return out + "\n";
}

std::string compare_footer(const RunInfo& info, const std::vector<Row>& rows,
                           const std::vector<KeptRatio>& earlier) {
  std::string out;
  int bad = 0;
  for (const BackendInfo& b : info.backends) {
    const Summary s = summarize(rows, b.name);
    bad += s.out_of_bounds;
    out += printf_string("# %-8s out of bounds values : %d %s   avg bus bandwidth : %g\n",
                         b.name.c_str(), s.out_of_bounds, s.out_of_bounds != 0 ? "FAILED" : "OK",
                         s.avg_busbw_gbs);
  }
  out += printf_string("# Out of bounds values : %d %s\n", bad, bad != 0 ? "FAILED" : "OK");
  FooterNotes notes;
  for (std::size_t i = 1; i < info.backends.size(); ++i)
    out += versus_lines(info.backends.front().name, info.backends[i], rows, earlier, notes);
  if (notes.noisy)
    out += printf_string(
        "# noisy: the ratios marked (noisy) moved by more than %.0f%% from pass to pass: this\n"
        "#   machine changed pace during the run (another job, the clock, the memory), so they\n"
        "#   are not facts; run again, or with a larger --repeat\n",
        kNoisyRatio * 100);
  // What a newcomer comparing small rooted calls needs to know to read their ratios.
  if (notes.rooted_behind)
    out +=
        "# roots: arcoll's broadcast, reduce, gather and scatter check that every rank names the\n"
        "#   same root, and fail on every rank where two differ: an exchange among all the ranks,\n"
        "#   which costs what an all-reduce of a few bytes does. The peers check nothing, and\n"
        "#   their roots return without waiting: in a loop of small rooted calls they run\n"
        "#   ahead of the other ranks, and the exchange is most of arcoll's time\n";
  if (notes.moved)
    out += printf_string(
        "# moved: the ratios marked (moved) differ by more than %.0f%% from an earlier run of\n"
        "#   this arcoll on this host: the machine's pace shifts from job to job too, so no\n"
        "#   single run's figure is the fact; compare runs, or let them run at the same time\n",
        kNoisyRatio * 100);
  return out + "#\n";
}

std::vector<KeptRatio> steady_ratios(const RunInfo& info, const std::vector<Row>& rows) {
  std::vector<KeptRatio> kept;
  const std::string& first = info.backends.front().name;
  for (std::size_t i = 1; i < info.backends.size(); ++i)
    for (const Row* kind : first_row_of_each_collective(first, rows))
      for (const Ratio& r : versus_ratios(first, info.backends[i], rows, *kind, {}, kOutOfPlace))
        if (!r.noisy)
          kept.push_back({info.backends[i].name, std::string(to_string(kind->coll)),
                          r.size_bytes, r.value});
  return kept;
}

std::string skipped_line(const std::string& backend, Coll coll, arcoll::DataType type,
                         arcoll::ReduceOp op, const std::string& reason) {
  std::string what = std::string(to_string(coll)) + " " + std::string(arcoll::to_string(type));
  if (reduces(coll)) what.append(" ").append(arcoll::to_string(op));
  return printf_string("# %s: %s skipped: %s\n", backend.c_str(), what.c_str(), reason.c_str());
}

std::string collective_line(Coll coll) {
  return "# " + std::string(to_string(coll)) + "\n";
}

std::string json_report(const RunInfo& info, const std::vector<Row>& rows, const Summary& summary) {
  json ranks = json::array();
  for (const RankPlace& r : info.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"host", r.host},
                     {"node", r.node},
                     {"local_rank", r.local_rank},
                     {"pid", r.pid}});
  json metadata = {
      {"hostname", info.host.hostname},
      {"cpu_model", info.host.cpu_model},
      {"cores", info.host.cores},
      {"memory_bytes", info.host.memory_bytes},
      {"kernel", info.host.kernel},
      {"os", info.host.os},
      {"arcoll_version", info.arcoll_version},
      {"git_commit", info.git_commit},
      {"collective", colls_text(info.sweep)},
      {"transport", info.transport},
      {"algorithm", info.algorithm},
      {"world_size", info.world_size},
      {"nodes", info.nodes},
      {"ranks_per_node", optional_json(info.ranks_per_node)},
      {"ranks", std::move(ranks)},
      {"date", info.date},
      {"command_line", info.command_line},
      {"min_bytes", info.min_bytes},
      {"max_bytes", info.max_bytes},
      {"step_factor", optional_json(info.step_factor)},
      {"step_bytes", optional_json(info.step_bytes)},
      {"datatypes", type_names(info.sweep)},
      {"ops", op_names(info.sweep)},
      {"iters", info.sweep.target_seconds > 0 ? json("auto") : json(info.sweep.iters)},
      {"target_time_s", info.sweep.target_seconds > 0 ? json(info.sweep.target_seconds) : json()},
      {"repeat", info.sweep.repeat},
      {"warmup_iters", info.sweep.warmup_iters},
      {"check", info.sweep.check},
      {"chunk_bytes", info.chunk_bytes},
      {"sockets_per_peer", info.sockets_per_peer},
      {"tcp_congestion", info.tcp_congestion},
      {"tcp_congestion_system", info.host.tcp_congestion},
      {"timeout_s", info.timeout_s},
      {"link_costs", info.link_costs},
      {"wire", arcoll::to_string(info.sweep.wire)},
      {"shared_buffers", info.sweep.shared_buffers},
      {"device", info.sweep.device},
  };
  json backends = json::array();
  for (const BackendInfo& b : info.backends) {
    const Summary s = summarize(rows, b.name);
    backends.push_back({{"name", b.name},
                        {"description", b.description},
                        {"out_of_bounds", s.out_of_bounds},
                        {"avg_busbw_gbs", s.avg_busbw_gbs}});
  }
  metadata["backends"] = std::move(backends);
  metadata["compare"] = info.compare;
  json json_rows = json::array();
  for (const Row& row : rows)
    json_rows.push_back({{"backend", row.backend},
                         {"collective", to_string(row.coll)},
                         {"size_bytes", row.size_bytes},
                         {"count", row.count},
                         {"type", arcoll::to_string(row.type)},
                         {"op", op_text(row)},
                         {"root", row.root},
                         {"out_of_place", group_json(row.out_of_place)},
                         {"in_place", group_json(row.in_place)},
                         {"predicted_us", optional_json(row.predicted_us)}});
  const json document = {{"schema", "arcoll.arbench/1"},
                         {"metadata", std::move(metadata)},
                         {"rows", std::move(json_rows)},
                         {"out_of_bounds", summary.out_of_bounds},
                         {"avg_busbw_gbs", summary.avg_busbw_gbs}};
  return document.dump(2) + "\n";
}

std::string csv_report(const RunInfo& info, const std::vector<Row>& rows) {
  const std::vector<std::string> metadata = {
      info.host.hostname,
      info.host.cpu_model,
      std::to_string(info.host.cores),
      std::to_string(info.host.memory_bytes),
      info.host.kernel,
      info.host.os,
      info.arcoll_version,
      info.git_commit,
      info.transport,
      info.algorithm,
      std::to_string(info.world_size),
      std::to_string(info.nodes),
      info.ranks_per_node ? std::to_string(*info.ranks_per_node) : std::string(),
      info.date,
      info.sweep.target_seconds > 0 ? std::string("auto") : std::to_string(info.sweep.iters),
      std::to_string(info.sweep.warmup_iters),
      info.sweep.check ? "1" : "0",
      info.command_line,
  };
  std::string out =
      "collective,size_bytes,count,type,op,root,placement,time_us,algbw_gbs,busbw_gbs,wrong,"
      "hostname,cpu_model,cores,memory_bytes,kernel,os,arcoll_version,git_commit,transport,"
      "algorithm,world_size,nodes,ranks_per_node,date,iters,warmup_iters,check,command_line\n";
  std::string metadata_fields;
  for (const auto& field : metadata) {
    metadata_fields += ',';
    metadata_fields += csv_field(field);
  }
  for (const Row& row : rows) {
    const std::pair<const char*, const GroupResult*> groups[] = {
        {"out_of_place", &row.out_of_place}, {"in_place", &row.in_place}};
    for (auto [placement, g] : groups) {
      const std::string fields[] = {std::string(to_string(row.coll)),
                                    std::to_string(row.size_bytes),
                                    std::to_string(row.count),
                                    std::string(arcoll::to_string(row.type)),
                                    op_text(row),
                                    std::to_string(row.root),
                                    placement,
                                    exact_number(g->time_us),
                                    exact_number(g->algbw_gbs),
                                    exact_number(g->busbw_gbs),
                                    g->wrong ? std::to_string(*g->wrong) : std::string()};
      for (const std::string& field : fields) {
        if (&field != fields) out += ',';
        out += field;
      }
      out += metadata_fields;
      out += '\n';
    }
  }
  return out;
}

}  // namespace arbench
