// `arbench plot RESULTS.json... -o FILE.svg|png`: bus bandwidth and time against message size,
// one line per file, backend, type and operator.
#pragma once

#include <string>
#include <vector>

#include "arbench/results_file.hpp"

namespace arbench {

// The two charts of sweep files (out-of-place figures), as one SVG document each.
std::string busbw_chart(const std::vector<ResultsFile>& files);
std::string time_chart(const std::vector<ResultsFile>& files);

int run_plot_command(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace arbench
