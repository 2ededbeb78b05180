// `arbench report RESULTS.json... -o report.html [--baseline BASE.json]`: one self-contained
// page (no script, nothing fetched) with each run's environment, its tables and charts, the
// comparison against a baseline, and for replays their breakdown charts.
#pragma once

#include <string>
#include <vector>

namespace arbench {

int run_report_command(const std::vector<std::string>& inputs, const std::string& baseline,
                       const std::string& threshold, const std::string& output);

}  // namespace arbench
