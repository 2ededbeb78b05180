// The α-β-γ cost model that `auto` chooses all-reduce algorithms with: a message of n bytes
// over a link takes α + n·β, reducing n bytes takes n·γ, and each algorithm states its time
// as a formula of these (registered next to its implementation). Link costs come from a
// tuning file measured by `arbench tune`, or from built-in defaults.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace arcoll {

struct LinkCost {
  double alpha = 0;  // seconds per message
  double beta = 0;   // seconds per byte moved
  double gamma = 0;  // seconds per byte reduced
};

// What the model knows of the ranks of a call.
struct Layout {
  int ranks = 1;
  int hosts = 1;
  int ranks_per_host = 1;  // 0 when hosts hold different numbers of ranks
  LinkCost intra;          // between ranks of one host
  LinkCost inter;          // between hosts (each host's link is shared by its ranks)
  std::size_t chunk_bytes = 512 * 1024;  // the configured pipeline chunk
  int channels = 2;                      // rings of the multi-channel ring
  // Flat algorithms are as fast as the slowest link they cross.
  const LinkCost& flat() const { return hosts > 1 ? inter : intra; }
  // Ranks of one host that cross its link at the same time in algorithms whose partners are
  // spread over hosts: they share the link's bandwidth.
  int link_sharers() const { return hosts > 1 && ranks_per_host > 1 ? ranks_per_host : 1; }
};

// One prediction: for `bytes` of all-reduce, this algorithm with this chunk takes `seconds`.
struct Plan {
  std::string algorithm;
  std::size_t chunk_bytes = 0;
  double seconds = 0;
};

struct CostQuery {
  const Layout& layout;
  double bytes;
  std::size_t chunk_bytes;
};
using CostFn = std::function<double(const CostQuery&)>;

namespace cost {

// The link between ranks `distance` apart (hosts hold consecutive ranks). When it leaves the
// host, every rank of the host crosses at once in the algorithms that use it (recursive
// doubling and halving): they share its bandwidth.
LinkCost exchange_link(const Layout& layout, int distance);

// Pipeline chunks tried for the algorithms whose time depends on it.
inline constexpr std::size_t kChunkCandidates[] = {64 * 1024, 256 * 1024, 1024 * 1024,
                                                   4 * 1024 * 1024};

// floor(log2 p) and the largest power of two <= p, for p >= 1.
int floor_log2(int p);
int floor_pof2(int p);

// Predicted all-reduce time of `algorithm` (which must have a cost formula) at its best chunk.
Plan predict(const std::string& algorithm, const Layout& layout, double bytes);
// The registered algorithm (and chunk) with the least predicted time; only flat ones with
// `flat_only` or on a one-level layout. Ties go to the algorithm first in name order.
Plan best(const Layout& layout, double bytes, bool flat_only = false);

}  // namespace cost
}  // namespace arcoll
