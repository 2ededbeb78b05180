// The sweep's plan: its flags (sweep_command.hpp) checked and turned into what every rank
// runs (sizes, collectives, backends, options, outputs).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "arbench/backends/backend.hpp"
#include "arbench/sweep.hpp"
#include "arbench/sweep_command.hpp"
#include "arcoll/options.hpp"
#include "arcoll/tuning.hpp"

namespace arbench {

// Everything a rank needs to run the sweep.
struct SweepPlan {
  SweepSettings sweep;
  std::size_t min_bytes = 0;
  std::size_t max_bytes = 0;
  std::optional<std::size_t> step_factor;
  std::optional<std::size_t> step_bytes;
  std::optional<int> np;  // workers
  int ps_servers = 0;     // --algo ps: dedicated server ranks, the job's last
  std::size_t ps_piece_bytes = 0;
  arcoll::Options options;
  std::string json_path;
  std::string csv_path;
  std::string command_line;
  // Backends in table order: arcoll first under --compare.
  std::vector<std::string> backends = {"arcoll"};
  // --algo all or a list: each algorithm of the one collective against the cost model.
  std::vector<std::string> algorithms;
  bool compare = false;
  BackendOptions backend_options;
  std::string mpirun_args;
  std::optional<double> min_busbw_gbs;                           // --min-busbw: the health gate
  arcoll::Calibration calibration = arcoll::Calibration::cache;  // without a tuning file
  bool first_run = false;  // no arguments: the newcomer's run (a comparison, kept per host)
};

// The flags checked (UsageError naming the flag) and turned into the plan.
SweepPlan make_plan(const SweepFlags& flags, int argc, const char* const* argv);

}  // namespace arbench
