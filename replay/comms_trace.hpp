// Communication traces recorded elsewhere, in the basic JSON format of PARAM's comms replay:
// per rank, a list of entries with the collective's name ("comms"), its input and output sizes
// in elements ("in_msg_size", "out_msg_size"), the data type ("dtype"), and optionally the
// start time ("startTime_ns"), the root, the world size and the ranks of its group
// ("global_ranks"). Replayed time-faithfully (each call at its recorded offset from the first)
// or back to back, with the latency of every call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/types.hpp"

namespace arcoll::replay {

enum class TraceOp {
  allreduce,
  allgather,
  reduce_scatter,
  broadcast,
  barrier,
  reduce,
  gather,
  scatter,
  alltoall,
};

struct TraceCall {
  std::string name;  // as PARAM names it: all_reduce, all_gather, reduce_scatter, ...
  TraceOp op = TraceOp::allreduce;
  std::size_t count = 0;  // elements: of the all-reduce, reduce or broadcast, each rank's block
                          // otherwise
  DataType type = DataType::f32;
  int root = 0;
  std::optional<std::int64_t> start_ns;
};

struct CommsTrace {
  std::string source;  // the file
  std::vector<TraceCall> calls;
  // Entries left out, by reason ("send: arcoll has no such collective").
  std::vector<std::pair<std::string, std::size_t>> skipped;
};

// The file rank `rank` replays: `path` itself, or in a directory rank<N>.json (PARAM's
// naming) or rank-<N>.json.
std::string comms_trace_file(const std::string& path, int rank);

// Reads one rank's trace for a job of `world_size` ranks. Throws ConfigurationError naming the
// file, the entry and the field at fault, or a trace recorded with another world size.
CommsTrace load_comms_trace(const std::string& file, int world_size);

// Runs the trace's calls on this rank (sum for the reductions, as PARAM does); returns each
// call's latency in seconds. Time-faithful: a call starts at its recorded offset from the
// first call (at once when the replay is behind, or when it has no recorded time); `lateness`
// gets how late each timed one started.
std::vector<double> run_comms_trace(Communicator& comm, const CommsTrace& trace, bool time_faithful,
                                    std::vector<double>* lateness = nullptr);

}  // namespace arcoll::replay
