// The first run's memory: the steady ratios of this host's earlier first runs (arbench with no
// arguments) of the same arcoll build, kept in the per-user cache, so that a run can say when
// its ratios moved from one job to the next. A shift that lasts a whole job (where the
// kernel placed its buffers, a neighbour of the VM) looks steady from inside it.
#pragma once

#include <string>
#include <vector>

#include "arbench/report.hpp"

namespace arbench {

struct EarlierRuns {
  std::string path;  // empty: no cache folder, nothing is read or kept
  std::vector<std::vector<KeptRatio>> runs;  // oldest first
};

// The runs kept for rank 0's host, CPU model and arcoll commit. A file that cannot be read, or
// was written for another CPU model, counts as no earlier run (with a warning when unreadable).
EarlierRuns load_earlier_runs(const RunInfo& info);
// The earlier runs' ratios, one list.
std::vector<KeptRatio> all_ratios(const EarlierRuns& earlier);
// Adds `now` and keeps the last kKeptRuns runs; a file that cannot be written costs a warning.
void keep_run(EarlierRuns& earlier, const RunInfo& info, std::vector<KeptRatio> now);

inline constexpr std::size_t kKeptRuns = 8;

}  // namespace arbench
