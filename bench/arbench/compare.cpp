#include "arbench/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "arbench/cli.hpp"
#include "arbench/report.hpp"
#include "arbench/text.hpp"

namespace arbench {
namespace {

// Relative change of one group, new against old: from the bandwidth, or from the time when
// there is no bandwidth to speak of (an empty message).
double change_of(const GroupFigures& old_group, const GroupFigures& new_group) {
  if (old_group.busbw_gbs > 0) return new_group.busbw_gbs / old_group.busbw_gbs - 1;
  if (new_group.time_us > 0) return old_group.time_us / new_group.time_us - 1;
  return 0;
}

// Two runs' typical timings differ by chance up to about twice their combined spread.
double noise_of(const GroupFigures& a, const GroupFigures& b) {
  if (!a.spread || !b.spread) return 0;
  return 2 * std::sqrt(*a.spread * *a.spread + *b.spread * *b.spread);
}

// Which group speaks for a row: a regression first, then a change lost in the noise, then
// no change, then an improvement.
int severity(Verdict v) {
  switch (v) {
    case Verdict::regressed:
      return 3;
    case Verdict::within_noise:
      return 2;
    case Verdict::unchanged:
      return 1;
    case Verdict::improved:
      return 0;
  }
  return 0;
}

Verdict verdict_of(double change, double noise, double threshold) {
  if (std::abs(change) <= threshold) return Verdict::unchanged;
  if (std::abs(change) <= noise) return Verdict::within_noise;
  return change < 0 ? Verdict::regressed : Verdict::improved;
}

}  // namespace

double parse_threshold(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  const std::string unit = end != nullptr ? end : "";
  if (end == text.c_str() || (unit != "" && unit != "%") || !(value >= 0) || !std::isfinite(value))
    throw UsageError("--threshold: " + quoted(text) + " is not a percentage such as 5%");
  if (value >= 100) throw UsageError("--threshold: " + quoted(text) + " is 100% or more");
  return value / 100;  // "5" and "5%" alike
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::unchanged:
      return "ok";
    case Verdict::within_noise:
      return "noise";
    case Verdict::improved:
      return "improved";
    case Verdict::regressed:
      return "REGRESSED";
  }
  return "";
}

Comparison compare_results(const ResultsFile& base, const ResultsFile& fresh, double threshold) {
  Comparison c;
  c.threshold = threshold;
  std::map<std::string, const ResultRow*> by_key;
  for (const ResultRow& r : fresh.rows) by_key[r.key()] = &r;
  bool spreads = !base.rows.empty() && !fresh.rows.empty();
  for (const ResultRow& old_row : base.rows) {
    auto found = by_key.find(old_row.key());
    if (found == by_key.end()) {
      c.only_base.push_back(old_row);
      continue;
    }
    const ResultRow& new_row = *found->second;
    by_key.erase(found);
    RowChange change;
    change.base = old_row;
    change.fresh = new_row;
    // The worse of the two groups speaks for the row.
    bool first = true;
    for (const auto& [name, old_group, new_group] :
         {std::tuple{"out of place", old_row.out_of_place, new_row.out_of_place},
          std::tuple{"in place", old_row.in_place, new_row.in_place}}) {
      spreads = spreads && old_group.spread && new_group.spread;
      const double delta = change_of(old_group, new_group);
      const double noise = noise_of(old_group, new_group);
      const Verdict v = verdict_of(delta, noise, threshold);
      if (first || severity(v) > severity(change.verdict) ||
          (v == change.verdict && delta < change.change)) {
        change.change = delta;
        change.noise = noise;
        change.group = name;
        change.verdict = v;
      }
      first = false;
    }
    if (change.verdict == Verdict::regressed) ++c.regressed;
    c.rows.push_back(change);
  }
  for (const ResultRow& r : fresh.rows)
    if (by_key.count(r.key())) c.only_new.push_back(r);
  c.noise_known = spreads;
  return c;
}

std::string comparison_text(const Comparison& c, const std::string& base,
                            const std::string& fresh) {
  std::string text = "# arbench compare: " + base + " (base) against " + fresh + " (new)\n";
  text += printf_string("# threshold %.1f%%; ", c.threshold * 100) +
          (c.noise_known
               ? "noise: twice the runs' combined spread (--repeat: how far the fastest "
                 "repetition was below the median)\n"
               : "noise unknown (run both with --repeat R to measure it): the threshold alone "
                 "decides\n");
  text += printf_string("# %10s %5s %5s  %-28s %9s %9s %8s %9s %9s %6s  %s\n", "size", "type", "op",
                        "backend transport np", "busbw old", "new", "change", "time old", "new",
                        "noise", "verdict");
  for (const RowChange& r : c.rows) {
    const std::string who = r.base.backend +
                            (r.base.backend == "arcoll" ? "(" + r.base.algorithm + ")" : "") + " " +
                            r.base.transport + " " + std::to_string(r.base.world_size);
    text += printf_string("  %10zu %5s %5s  %-28s %9.3f %9.3f %+7.1f%% %9s %9s %5.1f%%  %s%s\n",
                          r.base.size_bytes, r.base.type.c_str(), r.base.op.c_str(), who.c_str(),
                          r.base.out_of_place.busbw_gbs, r.fresh.out_of_place.busbw_gbs,
                          100 * r.change, format_time_us(r.base.out_of_place.time_us).c_str(),
                          format_time_us(r.fresh.out_of_place.time_us).c_str(), 100 * r.noise,
                          verdict_name(r.verdict),
                          r.verdict == Verdict::unchanged ? "" : (" (" + r.group + ")").c_str());
  }
  for (const auto& [label, rows] :
       {std::pair{"only in the base, missing from the new run", &c.only_base},
        std::pair{"only in the new run", &c.only_new}})
    if (!rows->empty()) {
      text += printf_string("# %zu row(s) %s:\n", rows->size(), label);
      for (const ResultRow& r : *rows) text += "#   " + r.key() + "\n";
    }
  if (c.failed())
    text += printf_string(
        "# FAILED: %d of %zu matched row(s) regressed beyond %.1f%%%s; %zu row(s) of the base "
        "missing\n",
        c.regressed, c.rows.size(), c.threshold * 100, c.noise_known ? " and the noise" : "",
        c.only_base.size());
  else
    text += printf_string("# PASSED: none of %zu matched row(s) regressed beyond %.1f%%\n",
                          c.rows.size(), c.threshold * 100);
  return text;
}

int run_compare_command(const std::string& base, const std::string& fresh,
                        const std::string& threshold) {
  double fraction = 0;
  ResultsFile files[2];
  try {
    fraction = parse_threshold(threshold);
    files[0] = load_results(base);
    files[1] = load_results(fresh);
    for (const ResultsFile& f : files)
      if (f.schema != "arcoll.arbench/1")
        throw UsageError(f.path + ": a " + f.schema +
                         " file: compare takes sweep results (arbench --json)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench compare: %s\n", e.what());
    return kUsageError;
  }
  const Comparison c = compare_results(files[0], files[1], fraction);
  print(comparison_text(c, base, fresh));
  return c.failed() ? 1 : 0;
}

}  // namespace arbench
