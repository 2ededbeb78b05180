// The α-β-γ cost model that `auto` chooses all-reduce algorithms with: a message of n bytes
// over a link takes α + n·β, reducing n bytes takes n·γ, and each algorithm states its time
// of each collective it runs as a formula of these (registered next to its implementation).
// Link costs come from a tuning file measured by `arbench tune`, or from built-in defaults.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "algorithms/layout.hpp"

namespace arcoll::cost {

// The link between ranks `distance` apart (hosts hold consecutive ranks). When it leaves the
// host, every rank of the host crosses at once in the algorithms that use it (recursive
// doubling and halving): they share its bandwidth.
LinkCost exchange_link(const Layout& layout, int distance);

// Pipeline chunks tried for the algorithms whose time depends on it.
inline constexpr std::size_t kChunkCandidates[] = {64 * 1024, 256 * 1024, 1024 * 1024,
                                                   4 * 1024 * 1024};

// Messages of `bytes` cut into pipeline chunks: at least one.
inline double chunks_of(double bytes, std::size_t chunk_bytes) {
  return std::max(1.0, std::ceil(bytes / static_cast<double>(chunk_bytes)));
}

// floor(log2 p) and the largest power of two <= p, for p >= 1.
int floor_log2(int p);
int floor_pof2(int p);

// Predicted time of `collective` by `algorithm` (which must have a cost formula for it) at its
// best chunk; for an all-reduce it cannot take (an infinite formula), that of the flat
// algorithm it runs instead. `bytes` as CostQuery's.
Plan predict(const std::string& algorithm, const Layout& layout, double bytes,
             Collective collective = Collective::allreduce);
// The registered all-reduce algorithm (and chunk) with the least predicted time; only flat
// ones with `flat_only` or on a one-level layout. Ties go to the algorithm first in name order.
Plan best(const Layout& layout, double bytes, bool flat_only = false);

// A parameter server's push_pull of `bytes` on every rank of `layout` (each a worker), cut
// into pieces of `piece_bytes` spread over the servers: `dedicated` servers on hosts of their
// own, each with a link like a worker host's, or (0) a share in every worker. Pushes of later
// pieces overlap replies to earlier ones, so each link's busier direction counts once, plus
// the replies of the last piece, which wait for its last push. A dedicated server's worker
// host link carries its workers' buffers once (BytePS's argument, against 2(n-1)/n times for
// an all-reduce), the busiest server's link every worker's copy of the pieces it holds (all
// of a key of one piece); with a share in every worker a host sends pushes and replies,
// 2(n-1)/n as a ring does when the pieces spread over every host.
double parameter_server_seconds(const Layout& layout, double bytes, int dedicated,
                                double piece_bytes);

}  // namespace arcoll::cost
