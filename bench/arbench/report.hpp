// What arbench prints and writes: the nccl-tests table on stdout, the JSON and CSV files
// (documented in docs/arbench-json.md), and the progress line on a terminal.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "arbench/sweep.hpp"
#include "arcoll/host.hpp"

namespace arbench {

// A ratio of two backends whose passes (--repeat) disagree by more than this (their
// interquartile range over the lower quartile) is called noisy rather than presented as a fact.
inline constexpr double kNoisyRatio = 0.25;

// Where one rank ran.
struct RankPlace {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  long pid = 0;
  std::string host;
};

// One implementation that ran the sweep (see backends/backend.hpp).
struct BackendInfo {
  std::string name;         // "arcoll", "mpi", "gloo", "nccl"
  std::string description;  // what exactly ran
  bool reduces = true;      // false: a reference (memcpy, ceiling), not a peer
};

// Everything about a run except its rows.
struct RunInfo {
  arcoll::HostInfo host;  // rank 0's host
  std::string arcoll_version;
  std::string git_commit;
  std::string transport;
  std::string algorithm;
  int world_size = 1;
  int nodes = 1;
  std::optional<int> ranks_per_node;  // when every host runs the same number of ranks
  std::vector<RankPlace> ranks;
  std::string date;          // start of the run, ISO-8601 UTC
  std::string command_line;  // shell-quoted
  std::size_t min_bytes = 0;
  std::size_t max_bytes = 0;
  std::optional<std::size_t> step_factor;  // multiplicative sweep
  std::optional<std::size_t> step_bytes;   // additive sweep
  SweepSettings sweep;
  std::size_t chunk_bytes = 0;
  int sockets_per_peer = 0;
  std::string tcp_congestion;  // Options::tcp_congestion
  double timeout_s = 0;
  std::string link_costs;  // where the cost model's link costs come from (calibration)
  std::vector<BackendInfo> backends;  // in table order; the first is the reference of --compare
  bool compare = false;               // --compare: the side-by-side table
  bool algorithms = false;            // --algo all: predicted against measured, per algorithm
};

struct Summary {
  int out_of_bounds = 0;     // results (row and group) with #wrong > 0
  double avg_busbw_gbs = 0;  // mean busbw over every result, as nccl-tests
};

Summary summarize(const std::vector<Row>& rows);
// The summary of one backend's rows.
Summary summarize(const std::vector<Row>& rows, const std::string& backend);

// The table, in nccl-tests' layout. Each piece ends with a newline.
std::string table_header(const RunInfo& info);
std::string table_row(const Row& row);
std::string table_footer(const Summary& summary);
// --algo all (or a list): one line per size and algorithm with the model's time, the measured
// one (out of place) and the model's error; with a 16-bit wire also maxabs and maxrel.
std::string algorithms_header(bool wire);
std::string algorithms_row(const Row& row);
// nccl-tests' time column: %7.2f below 100 us, %7.1f below 10 ms, %7.0f above.
std::string format_time_us(double us);

// --compare's side-by-side table: size and count, then per backend the out-of-place time and
// busbw and the #wrong of both groups, and against every backend after the first the first's
// busbw ratio ("x1.35": the first is 1.35 times faster). `rows` holds one size's rows, any
// backend may be missing (it cannot run that type); `skipped` lines are '#' comments.
std::string compare_header(const RunInfo& info);
std::string compare_row(const RunInfo& info, const std::vector<Row>& rows);
// A busbw ratio of the first backend over a peer at a size, as runs keep it for later ones.
struct KeptRatio {
  std::string peer;
  std::string coll;
  std::size_t size_bytes = 0;
  double value = 0;
};
// The summary lines, each ratio marked noisy when its passes disagree and moved when it lies
// more than kNoisyRatio away from one of `earlier` (earlier runs' ratios).
std::string compare_footer(const RunInfo& info, const std::vector<Row>& rows,
                           const std::vector<KeptRatio>& earlier = {});
// Every ratio of the first backend over each peer at each size (out of place, the first type
// and operator of each collective) whose passes agree: what a later run compares itself with.
std::vector<KeptRatio> steady_ratios(const RunInfo& info, const std::vector<Row>& rows);
std::string skipped_line(const std::string& backend, Coll coll, arcoll::DataType type,
                         arcoll::ReduceOp op, const std::string& reason);
// "# allgather": where a collective's rows begin when a sweep has several.
std::string collective_line(Coll coll);

std::string json_report(const RunInfo& info, const std::vector<Row>& rows, const Summary& summary);
std::string csv_report(const RunInfo& info, const std::vector<Row>& rows);

}  // namespace arbench
