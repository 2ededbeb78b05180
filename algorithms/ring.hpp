// Ring passes: reduce-scatter and all-gather around the ring of ranks, pipelined in chunks so
// that sending, receiving and reducing overlap. A pass advances one received chunk at a
// time, so that several rings (the channels of the multi-channel ring) can interleave in one
// thread; the ring, multi-channel ring and hierarchical algorithms are built from them.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms/algorithm.hpp"

namespace arcoll::ring {

// Where each of p segments lies, in elements.
struct Segments {
  std::vector<std::size_t> offset;  // p + 1 entries
  std::size_t begin(int s) const { return offset[static_cast<std::size_t>(s)]; }
  std::size_t count(int s) const {
    return offset[static_cast<std::size_t>(s) + 1] - offset[static_cast<std::size_t>(s)];
  }
  // `count` elements split as evenly as possible (the first count % p segments get one more).
  static Segments balanced(std::size_t count, int p);
  static Segments uniform(std::size_t block, int p);
};

class Pass {
 public:
  virtual ~Pass() = default;
  // Completes the next received chunk; false once the pass is over (its sends waited for).
  virtual bool advance() = 0;
  void run() {
    while (advance()) {
    }
  }
};

// Where a rank's partial result of segment s is kept.
using SegmentOut = std::function<char*(int segment)>;

// After it, segment `rank` of the reduction of every rank's `input` is at segment_out(rank).
std::unique_ptr<Pass> reduce_scatter(PointToPoint& p2p, const Segments& segments, DataType type,
                                     ReduceOp op, const char* input, SegmentOut segment_out,
                                     int channel = 0);
// Segment `rank` is in place in `buffer`; the pass fills in every other segment.
std::unique_ptr<Pass> allgather(PointToPoint& p2p, const Segments& segments, DataType type,
                                char* buffer, int channel = 0);
// All-reduce of `count` elements from `input` into `output` (which may be `input`): the
// reduce-scatter pass, then the all-gather pass.
std::unique_ptr<Pass> allreduce(PointToPoint& p2p, std::size_t count, DataType type, ReduceOp op,
                                const char* input, char* output, int channel = 0);

// The ranks in ring order: those of one host next to each other, and within a host those of
// one NUMA node (hosts in order of their lowest rank, then NUMA nodes, then ranks), so that
// an all-reduce ring leaves each host and each NUMA node once and comes back once whatever
// numbering the launcher chose.
std::vector<int> host_order(const PointToPoint& p2p);

// Runs passes together, advancing each in turn, until all are over.
void run_together(std::vector<std::unique_ptr<Pass>>& passes);

// Ring all-reduce time over `link`: 2(p-1) steps of one chunk-pipelined
// segment each, 2(p-1)/p of the data sent, (p-1)/p of it reduced.
double allreduce_cost(int ranks, double bytes, const LinkCost& link,
                      std::size_t chunk_bytes);

}  // namespace arcoll::ring
