// The sweep: for each collective, type and operator, every size timed and checked,
// nccl-tests' way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "arbench/collectives.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/types.hpp"

namespace arbench {

class Backend;

inline constexpr int kMinAutoIters = 5;
// -n auto over `repeat` passes: at least kMinAutoIters timed iterations in all, one per pass.
inline int min_auto_iters_per_pass(int repeat) {
  return (kMinAutoIters + repeat - 1) / repeat;
}
inline constexpr double kAutoTargetSeconds = 0.05;  // -n auto

struct SweepSettings {
  std::vector<Coll> colls = {Coll::allreduce};
  std::vector<std::size_t> sizes;  // bytes; each row uses size / sizeof(type) elements
  std::vector<arcoll::DataType> types;
  std::vector<arcoll::ReduceOp> ops;  // pairs that arcoll::is_supported rejects are skipped;
                                      // collectives that do not reduce run one row ("none")
  int warmup_iters = 5;
  int iters = 20;
  // -n auto: each group times as many iterations as fill about this many seconds per pass (at
  // least min_auto_iters_per_pass), counted from a probe the ranks agree on, and warms up
  // with fewer than `warmup_iters` where one call lasts that long; 0: `iters` iterations.
  double target_seconds = 0;
  // Passes through the sizes, each timing `iters` iterations per group: a row's time is their
  // median, and their spread says how noisy it is (nccl-tests' -N runs the sweep again).
  // Every size's groups are warmed up first; then each pass runs through all the sizes, the
  // backends of a size in turn, so that a slow phase of the host (seconds to minutes on a
  // VM) lands on one pass of every backend rather than on all passes of one size.
  int repeat = 1;
  bool check = true;
  // Mixed precision: arcoll carries f32 as this 16-bit type (f32: not at all); f32 rows then
  // use inputs the wire rounds, and report their error (see Pattern).
  arcoll::DataType wire = arcoll::DataType::f32;
  // arcoll's buffers come from arcoll::mem_alloc (arcoll/memory.hpp); else, and for the
  // peers always, from the heap.
  bool shared_buffers = false;
  // Where arcoll's buffers live: "host", or a device of DeviceRegistry (backend.hpp), "cuda".
  std::string device = "host";
};

// One group of a row: out-of-place or in-place.
// The spread of a group's repeated timings (--repeat), each the mean of `iters` iterations on
// the slowest rank.
struct Spread {
  int count = 0;
  double min_us = 0, median_us = 0, max_us = 0, p99_us = 0;
  double cv = 0;  // coefficient of variation: standard deviation / mean
  std::vector<double> passes_us;  // each pass's time, in pass order
};

struct GroupResult {
  double time_us = 0;    // time of one allreduce, the slowest rank's: mean of the iterations
                         // (the median over the repetitions with --repeat)
  double algbw_gbs = 0;  // size_bytes / time, in 1e9 bytes per second
  double busbw_gbs = 0;  // algbw * 2 (n - 1) / n
  int iters = 0;         // timed iterations of each repetition
  // Elements that differ from the reference, summed over ranks; nullopt when not checked.
  std::optional<std::int64_t> wrong;
  // Rows rounded by a 16-bit wire: the largest absolute error and the largest error relative
  // to the sum of the inputs' magnitudes, over ranks.
  std::optional<double> max_abs_error;
  std::optional<double> max_rel_error;
  std::optional<Spread> spread;  // with --repeat R > 1
};

struct Row {
  std::string backend = "arcoll";  // Backend::name() of what ran it
  Coll coll = Coll::allreduce;
  std::size_t size_bytes = 0;      // count * sizeof(type)
  std::size_t count = 0;
  arcoll::DataType type = arcoll::DataType::f32;
  arcoll::ReduceOp op = arcoll::ReduceOp::sum;
  int root = -1;  // -1: the collective has no root
  GroupResult out_of_place;
  GroupResult in_place;
  // --algo all: the cost model's time for this size and algorithm, and what auto would run.
  std::optional<double> predicted_us;
  std::string predicted_algorithm;
};

// min, min*factor, ... up to max when factor > 1; min, min+step, ... otherwise. A size of 0
// is followed by 1 when multiplying (so that -b 0 does not loop forever).
std::vector<std::size_t> sweep_sizes(std::size_t min_bytes, std::size_t max_bytes,
                                     std::size_t factor, std::size_t step_bytes);

// Number of rows run_sweep produces.
std::size_t row_count(const SweepSettings& settings);

struct SweepCallbacks {
  // Called on every rank before a size's rows are warmed up (each backend's, in turn) and after
  // each completes (its last pass), with the row's index and the number of rows. `before`
  // sees the row's size, count, type and op only.
  std::function<void(const Row&, std::size_t index, std::size_t total)> before;
  std::function<void(const Row&, std::size_t index, std::size_t total)> after;
  // Called on every rank, once per collective, type and operator a backend cannot run, before
  // its sizes.
  std::function<void(const std::string& backend, Coll, arcoll::DataType, arcoll::ReduceOp,
                     const std::string& reason)>
      skipped;
  // With several passes: called on every rank as pass `pass` (1-based) of `passes` reaches a
  // size.
  std::function<void(int pass, int passes, const Row&)> pass;
};

// The sweep through each of `backends`, interleaved: for every collective, type and op, the
// sizes (nccl-tests' order) once per pass, each backend in turn at each size (rows in that
// order; a backend that cannot run a collective with a type and op has no rows for it). Every rank
// calls this with the same settings. `comm` carries arbench's own coordination (the slowest
// rank's time, the #wrong sum). Errors of the library propagate as arcoll::Error.
std::vector<Row> run_sweep(arcoll::Communicator& comm, const std::vector<Backend*>& backends,
                           const SweepSettings& settings, const SweepCallbacks& callbacks = {});

}  // namespace arbench
