// Replays data-parallel training over real ranks: each rank emulates forward and backward
// compute for the modelled times (sleeping, as a GPU's compute leaves the host CPU free) and
// performs the real gradient all-reduces through arcoll, as the policy dictates, with real
// buffers of the real sizes. A communication thread owns the communicator, as DDP's and
// Horovod's background work does, so that all-reduces overlap the rest of backward.
#pragma once

#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "replay/model.hpp"
#include "replay/policy.hpp"
#include "replay/profile.hpp"

namespace arcoll::replay {

struct ReplayConfig {
  Model model;
  int batch = 32;  // per rank
  DeviceProfile device;
  bool half_compute = false;  // layers computed in 16-bit math (mixed-precision training)
  Policy policy;
  std::string algorithm = "auto";
  int iterations = 20;
  int warmup = 3;
};

// The modelled compute of one layer for the configured batch, in seconds.
double forward_seconds(const ReplayConfig& config, const Layer& layer);
double backward_seconds(const ReplayConfig& config, const Layer& layer);

// One all-reduce as it ran: when it could start, started and ended, from the iteration's start.
struct BucketSpan {
  std::size_t bytes = 0;
  double ready = 0, start = 0, end = 0;
};

struct IterationRecord {
  double total = 0;    // start of forward to the last all-reduce's end
  double compute = 0;  // forward and backward as modelled
  double forward_end = 0;
  double backward_end = 0;
  double communication = 0;  // sum of the all-reduces' durations
  double exposed = 0;        // communication not hidden behind compute: total - compute
  std::vector<BucketSpan> buckets;
};

struct ReplayResult {
  std::vector<Bucket> plan;
  std::vector<IterationRecord> iterations;  // measured ones, after the warm-up
};

// Runs the replay on this rank; every rank of `comm` must call it with the same config.
ReplayResult run_replay(Communicator& comm, const ReplayConfig& config);

// Every rank's iterations, on every rank (a collective: all ranks call it after run_replay).
std::vector<std::vector<IterationRecord>> gather_iterations(Communicator& comm,
                                                            const ReplayResult& result);

// The iterations as a Chrome trace (the JSON that Perfetto and chrome://tracing open): one
// process per rank, compute on one thread and the all-reduces on another, iterations laid end
// to end at the pace of the slowest rank.
std::string chrome_trace(const std::vector<std::vector<IterationRecord>>& ranks,
                         const std::string& title);

}  // namespace arcoll::replay
