// Algorithms register themselves: a name, a one-line summary, and an implementation for each
// collective they support. The CLI's --algo choices come from their registry.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/layout.hpp"
#include "algorithms/point_to_point.hpp"
#include "arcoll/types.hpp"
#include "src/base/registry.hpp"

namespace arcoll {

enum class Collective : std::uint8_t {
  allreduce,
  reduce_scatter,
  allgather,
  broadcast,
  barrier,
  reduce,
  gather,
  scatter,
  alltoall,
  alltoallv,
};
std::string_view to_string(Collective collective);
// The collective named as to_string() names it.
std::optional<Collective> parse_collective(std::string_view name);

// Arguments of one collective call, already validated by the communicator.
// allreduce, reduce: count elements in send and recv (reduce: recv on the root only).
// reduce_scatter, scatter: count = elements each rank receives (send holds size*count; scatter:
// on the root only). allgather, gather: count = elements each rank sends (recv holds
// size*count; gather: on the root only). broadcast: recv is the buffer, count its elements.
// alltoall: count elements to and from each rank (size*count in send and recv). alltoallv:
// the blocks' counts and offsets (elements), size() of each; count unused.
// ReduceOp::avg never reaches an algorithm: it runs as sum and the communicator divides.
struct CollectiveArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  int root = 0;
  const std::size_t* send_counts = nullptr;
  const std::size_t* send_offsets = nullptr;
  const std::size_t* recv_counts = nullptr;
  const std::size_t* recv_offsets = nullptr;
};

using CollectiveFn = std::function<void(PointToPoint&, const CollectiveArgs&)>;

// An all-reduce with nothing to exchange (one rank, or no elements): copies send to recv and
// returns true.
bool allreduce_is_local(PointToPoint& p2p, const CollectiveArgs& args);

struct AlgorithmInfo {
  static constexpr const char* kKind = "algorithm";
  std::string name;
  std::string summary;
  std::map<Collective, CollectiveFn> implementations;
  // Predicted time of each collective it has a formula for (see cost_model.hpp); all-reduce
  // algorithms without one are never chosen by `auto`.
  std::map<Collective, CostFn> costs;
  // Whether the time depends on the pipeline chunk: the model then also picks the chunk.
  bool chunked = false;
  // Built from other algorithms over groups of hosts; on one level (one host, or one rank per
  // host) it runs a flat algorithm, which `auto` then picks by its own name.
  bool composite = false;
  // Whether it reads and writes this call's buffers with the host (on the boards), where a call
  // on device memory runs on host copies of them; null: never. A composite algorithm, which
  // may choose such an algorithm inside, always runs on host copies.
  std::function<bool(Collective, const PointToPoint&, const CollectiveArgs&)> reads_buffers =
      nullptr;
};

using AlgorithmRegistry = Registry<AlgorithmInfo>;
using AlgorithmRegistrar = Registrar<AlgorithmInfo>;

// The implementation of `collective` by the algorithm `name`; nullptr when there is none.
const CollectiveFn* find_collective(std::string_view name, Collective collective);
// Names of the algorithms implementing `collective` (and, `with_cost`, with a cost formula for
// it), sorted.
std::vector<std::string> algorithm_names(Collective collective, bool with_cost = false);

}  // namespace arcoll
