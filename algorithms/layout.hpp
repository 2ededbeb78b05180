// What the cost model knows of the ranks of a call (hosts, ranks per host, the costs of the
// links within and between hosts), and the shape of a cost formula: each algorithm states its
// predicted time of each collective it runs as one, registered next to its implementation
// (cost_model.hpp uses them).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "arcoll/transport_costs.hpp"

namespace arcoll {

struct LinkCost {
  double alpha = 0;  // seconds per message
  double beta = 0;   // seconds per byte moved
  double gamma = 0;  // seconds per byte reduced
  // β and γ of buffers that stay in the caches (0: the same as above); see at().
  double cached_beta = 0;
  double cached_gamma = 0;
  // β of all-reduces of up to kSmallMessageBytes, whose messages go in one piece (0: as
  // cached_beta).
  double small_beta = 0;
  // All-reduces of buffers up to this many bytes stay in the caches, from the other on they
  // do not (see set_cache_window).
  double cached_until = kCachedBytes;
  double uncached_from = kUncachedBytes;
  // Whether its transport writes a reduced result on as it is reduced
  // (PointToPoint::irecv_reduce_send): a message sent back so costs no copy into the link.
  bool forwards = false;
  // Whether its transport's receivers read a large message from the sender's buffer each on
  // their own (Transport::fans_out): a buffer sent to every rank at once costs the sender one
  // message's time, not one a rank.
  bool fans_out = false;
  // Whether its transport's small messages cost neither end a system call
  // (Transport::small_messages_cheap): cutting a message into more costs little.
  bool cheap_messages = false;
  // The costs of an all-reduce of `bytes`: the cached figures up to cached_until, the others
  // from uncached_from, and in between a blend linear in log(bytes); below kCachedBytes, β
  // goes the same way to small_beta at kSmallMessageBytes. The result has no cached or small
  // figures: it is sized once.
  LinkCost at(double bytes) const;
};

// The size of buffer whose `ranks_per_host` ranks, each holding a send and a receive buffer of
// it, fill a host's last-level cache of `cache_bytes` (0 where either is unknown).
double cache_per_buffer(double cache_bytes, int ranks_per_host);

// Where an all-reduce's buffers leave a host's last-level cache of `cache_bytes` (0: unknown,
// the sizes the figures were measured at): in cache while they fill at most half of it
// (cache_per_buffer), out once they fill twice it. Sets `link`'s cached_until and
// uncached_from.
void set_cache_window(LinkCost& link, double cache_bytes, int ranks_per_host);

// What the model knows of the ranks of a call.
struct Layout {
  int ranks = 1;
  int hosts = 1;
  int ranks_per_host = 1;  // 0 when hosts hold different numbers of ranks
  LinkCost intra;          // between ranks of one host
  LinkCost inter;          // between hosts (each host's link is shared by its ranks)
  std::size_t chunk_bytes = 512 * 1024;  // the configured pipeline chunk
  int channels = 2;                      // rings of the multi-channel ring
  // Bytes each rank may post on the shared boards per call (PointToPoint::board_capacity;
  // 0: no boards).
  std::size_t board_capacity = 0;
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

// `bytes`: the size of the call as nccl-tests counts it: the buffer of an all-reduce, reduce or
// broadcast; the whole of the blocks (p times a rank's) of a reduce-scatter, all-gather,
// gather, scatter or all-to-all.
struct CostQuery {
  const Layout& layout;
  double bytes;
  std::size_t chunk_bytes;
};
using CostFn = std::function<double(const CostQuery&)>;

}  // namespace arcoll
