// `arbench compare BASE.json NEW.json`: row by row, what changed between two sweeps, and
// whether any row regressed beyond a threshold and beyond the noise that --repeat measured.
#pragma once

#include <string>
#include <vector>

#include "arbench/results_file.hpp"

namespace arbench {

enum class Verdict { unchanged, within_noise, improved, regressed };

struct RowChange {
  ResultRow base, fresh;
  // busbw new / old - 1 of the group that changed most for the worse (from the times when
  // the bandwidth is 0: an empty message).
  double change = 0;
  double noise = 0;   // relative band the repeats' spread allows; 0 when unknown
  std::string group;  // "out of place" or "in place": the group the change is of
  Verdict verdict = Verdict::unchanged;
};

struct Comparison {
  double threshold = 0.05;
  bool noise_known = false;  // both files have --repeat spreads
  std::vector<RowChange> rows;
  std::vector<ResultRow> only_base, only_new;
  int regressed = 0;
  // Regressed rows, or rows of the baseline the new run lacks (it cannot vouch for them).
  bool failed() const { return regressed > 0 || !only_base.empty(); }
};

// "5%" or "5" as 0.05; UsageError naming --threshold otherwise.
double parse_threshold(const std::string& text);

Comparison compare_results(const ResultsFile& base, const ResultsFile& fresh, double threshold);
const char* verdict_name(Verdict v);

// The table and the verdict line, for the terminal.
std::string comparison_text(const Comparison& c, const std::string& base, const std::string& fresh);

int run_compare_command(const std::string& base, const std::string& fresh,
                        const std::string& threshold);

}  // namespace arbench
