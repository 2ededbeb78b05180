// Direct exchanges: every block goes straight from the rank that has it to the rank that needs
// it, all posted at once. Gather and scatter (the root talks to each rank: it moves (p-1)/p
// of the data once, which no tree beats in bytes), all-gather, reduce (on 2 ranks; on more, of
// small buffers), all-to-all (each pair exchanges its two blocks; rank r starts with rank
// r+1 so that no rank is everyone's first partner), and broadcast where receivers read in
// parallel.
#include <algorithm>
#include <span>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "algorithms/cost_model.hpp"

namespace arcoll {
namespace {

// Block r of a rooted call's buffer: `count` elements at r * count.
char* block(void* buffer, int r, std::size_t bytes) {
  return static_cast<char*>(buffer) + static_cast<std::size_t>(r) * bytes;
}

// A rank that reads its peers' blocks puts its own into place while they move, or from
// kCopyAfterExchangeBytes once they have: alongside them, 2.9 against 4.0 us for an all-gather
// of 16 KiB a rank on 2 ranks, the same from 64 KiB to 1 MiB, 10-20% slower at 4 and 16 MiB,
// where the copy and the peers' reads compete for the memory (2 cores of an Intel Xeon).
constexpr std::size_t kCopyAfterExchangeBytes = 1 << 20;

void wait_copying_own_block(PointToPoint& p2p, std::span<const RequestPtr> requests, void* to,
                            const void* from, std::size_t bytes) {
  const bool alongside = bytes < kCopyAfterExchangeBytes;
  if (alongside) p2p.copy(to, from, bytes);
  p2p.wait_all(requests);
  if (!alongside) p2p.copy(to, from, bytes);
}

void direct_gather(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  if (p2p.rank() != a.root) {
    p2p.wait(p2p.isend(a.root, a.send, bytes));
    return;
  }
  std::vector<RequestPtr> receives;
  for (int r = 0; r < p2p.size(); ++r)
    if (r != a.root) receives.push_back(p2p.irecv(r, block(a.recv, r, bytes), bytes));
  wait_copying_own_block(p2p, receives, block(a.recv, a.root, bytes), a.send, bytes);
}

// The root sends every other rank r `bytes` from `part(r)` at once, each receiving them into
// a.recv. Returns the root's sends, to wait for (none elsewhere: the receive is done).
template <class Part>
std::vector<RequestPtr> from_root(PointToPoint& p2p, const CollectiveArgs& a, std::size_t bytes,
                                  Part part) {
  std::vector<RequestPtr> sends;
  if (p2p.rank() != a.root) {
    p2p.wait(p2p.irecv(a.root, a.recv, bytes));
    return sends;
  }
  for (int r = 0; r < p2p.size(); ++r)
    if (r != a.root) sends.push_back(p2p.isend(r, part(r), bytes));
  return sends;
}

void direct_scatter(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  auto* send = const_cast<void*>(a.send);
  const auto sends = from_root(p2p, a, bytes, [&](int r) { return block(send, r, bytes); });
  if (p2p.rank() != a.root) return;
  // The root's copy goes alongside its peers' reads: it reads nothing itself (1 MiB a rank
  // on 2 ranks: 65 us, against 187 us after them).
  p2p.copy(a.recv, block(send, a.root, bytes), bytes);
  p2p.wait_all(sends);
}

// All-gather: each rank's block goes to every other from its send buffer, every rank reading
// its p-1 blocks at once, and into place here while the peers read it, or from
// kCopyAfterExchangeBytes after the exchange. The ring sends a rank's block from the receive
// buffer after that copy and passes blocks on step by step: over shared memory of an Intel Xeon
// (2 cores, busbw against Open MPI in the same run) it reached x0.47-0.63 on 2 ranks (64 KiB-1
// MiB a rank) where this reaches x0.97-1.07, and this took 0.6-0.9 of the ring's time on 3
// ranks (8 KiB-32 MiB a rank) and 8 ranks (3 KiB-12 MiB a rank).
void direct_allgather(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  const int p = p2p.size(), rank = p2p.rank();
  std::vector<RequestPtr> requests;
  for (int k = 1; k < p; ++k) {
    const int from = (rank + p - k) % p;
    requests.push_back(p2p.irecv(from, block(a.recv, from, bytes), bytes));
  }
  for (int k = 1; k < p; ++k)
    requests.push_back(p2p.isend((rank + k) % p, const_cast<void*>(a.send), bytes));
  wait_copying_own_block(p2p, requests, block(a.recv, rank, bytes), a.send, bytes);
}

// A reduce's buffers go to the root in chunks of this size, each reduced as it lands: the
// root's working set (its buffer and the result where one chunk lands) stays in cache, where
// whole messages of 1 MiB and more spilled from it. 2 ranks, 2 cores of an Intel Xeon (2 MiB
// of L2 a core), out of place, whole messages -> chunks of 256 KiB: shm 1 MiB 110 -> 90 us,
// 4 MiB 843 -> 419; UCX 1 MiB 231 -> 111, 4 MiB 949 -> 539. Chunks of 128 KiB took as long;
// of 512 KiB over UCX 1.4-1.7x as long (past its eager limit each is fetched whole into a
// staging buffer of its own, ucx_transport.hpp). Between hosts, and where messages cost a
// system call at each end (LinkCost::cheap_messages), a buffer goes whole: TCP lands it as it
// streams in, and chunks of 256 KiB took 1.5-1.8x as long at 512 KiB-1 MiB (2 emulated
// hosts, one rank each, unshaped veth; one run each, whole messages took 0.68-1.01 of chunks
// of 1 or 2 MiB at 8 and 32 MiB, 1.3-1.5x of chunks of 1 MiB at 2 MiB). Over TCP within a
// host (2 ranks of an AMD EPYC VM, medians of 7 interleaved runs, out of place / in place,
// chunks -> whole): 512 KiB -27%/-19%, 2 MiB -22%/-18%, 8 MiB -10%/-11%, 32 MiB -5%/-7%.
constexpr std::size_t kReduceChunkBytes = 256 * 1024;

// Reduce: every rank sends its buffer to the root, which reduces them in rank order (its own
// first), one message deep where the ring's reduce-scatter then gather is p - 1 steps and a
// gather deep. A peer's chunks are all received at once (each lands in its own part of the
// result); the next peer's reduce into what the one before left. Both ends of a pair cut alike:
// chunks when the peer is on the root's host and messages there are cheap, else the whole
// buffer.
void direct_reduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t elem = size_of(a.type);
  auto at = [&](const void* buffer, std::size_t first) {
    return static_cast<char*>(const_cast<void*>(buffer)) + first * elem;
  };
  // (A call of no elements still sends its one empty message: the root hears every rank.)
  auto each_chunk = [&](int peer, auto f) {
    const bool cut = p2p.node_of(peer) == p2p.node_of(a.root) && p2p.layout().intra.cheap_messages;
    const std::size_t chunk = cut ? std::max<std::size_t>(1, kReduceChunkBytes / elem)
                                  : std::max<std::size_t>(1, a.count);
    std::size_t first = 0;
    do {
      const std::size_t n = std::min(chunk, a.count - first);
      f(first, n);
      first += n;
    } while (first < a.count);
  };
  std::vector<RequestPtr> requests;
  if (p2p.rank() != a.root) {
    each_chunk(p2p.rank(), [&](std::size_t first, std::size_t n) {
      requests.push_back(p2p.isend(a.root, at(a.send, first), n * elem));
    });
    p2p.wait_all(requests);
    return;
  }
  if (p2p.size() == 1) return p2p.copy(a.recv, a.send, a.count * elem);
  const void* with = a.send;
  for (int r = 0; r < p2p.size(); ++r) {
    if (r == a.root) continue;
    requests.clear();
    each_chunk(r, [&](std::size_t first, std::size_t n) {
      requests.push_back(p2p.irecv_reduce(r, at(a.recv, first), at(with, first), n, a.type, a.op));
    });
    p2p.wait_all(requests);
    with = a.recv;
  }
}

// all-to-all as all-to-all-v with blocks of `count` elements. In place (all-to-all's send ==
// recv), the blocks that go out are copied first, as the receives from the same peers
// overwrite them, and the rank's own block stays where it is: p - 1 blocks copied. A copy of
// the whole buffer, then of the own block back, copied p + 1 (2 ranks, 2 MiB in place: x0.63-
// 0.66 of Open MPI's busbw, x1.24-1.25 so).
void direct_alltoallv(PointToPoint& p2p, const CollectiveArgs& a) {
  const int p = p2p.size(), rank = p2p.rank();
  const std::size_t elem = size_of(a.type);
  auto place = [&](const std::size_t* offsets, int r) {
    return (offsets != nullptr ? offsets[r] : static_cast<std::size_t>(r) * a.count) * elem;
  };
  auto bytes = [&](const std::size_t* counts, int r) {
    return (counts != nullptr ? counts[r] : a.count) * elem;
  };
  const auto* send = static_cast<const char*>(a.send);
  auto* recv = static_cast<char*>(a.recv);
  const bool in_place = send == recv && a.count != 0;  // all-to-all's: blocks all alike
  const std::size_t block = a.count * elem;
  char* kept = in_place && p > 1 ? static_cast<char*>(p2p.scratch((p - 1) * block, 0)) : nullptr;
  // Where the block for the k-th peer on, rank + k, goes from.
  auto outgoing = [&](int k) -> const char* {
    return kept != nullptr ? kept + (k - 1) * block : send + place(a.send_offsets, (rank + k) % p);
  };
  for (int k = 1; kept != nullptr && k < p; ++k)
    p2p.copy(kept + (k - 1) * block, send + place(a.send_offsets, (rank + k) % p), block);
  std::vector<RequestPtr> requests;
  for (int k = 1; k < p; ++k) {
    const int from = (rank - k + p) % p;
    requests.push_back(
        p2p.irecv(from, recv + place(a.recv_offsets, from), bytes(a.recv_counts, from)));
  }
  for (int k = 1; k < p; ++k) {
    const int to = (rank + k) % p;
    requests.push_back(p2p.isend(to, outgoing(k), bytes(a.send_counts, to)));
  }
  if (in_place) return p2p.wait_all(requests);
  wait_copying_own_block(p2p, requests, recv + place(a.recv_offsets, rank),
                         send + place(a.send_offsets, rank), bytes(a.send_counts, rank));
}

// The root's buffer to every rank at once: for a transport whose receivers read it each on
// their own (LinkCost::fans_out), where the hops of a chain cost more than the reads in
// parallel (see board.cpp's by_messages()).
void direct_broadcast(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  if (p2p.size() == 1 || bytes == 0) return;
  p2p.wait_all(from_root(p2p, a, bytes, [&](int) { return a.recv; }));
}

// Every block at once: the busiest rank's link (the root's; any rank's in all-gather and
// all-to-all) takes the others' p - 1 blocks.
double blocks_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  return l.flat().alpha + (l.ranks - 1.0) / l.ranks * q.bytes * l.flat().beta;
}

// Broadcast: the root's link carries the buffer once a rank, or once where the ranks read it
// in parallel (fans_out; UCX's eager messages, to 256 KiB, the root copies into each peer's
// fifo: priced as read in parallel too).
double broadcast_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  const LinkCost& link = l.flat();
  return link.alpha + (link.fans_out ? 1.0 : l.ranks - 1.0) * q.bytes * link.beta;
}

// Reduce: every buffer into the root, which reads and reduces each as it lands (a read is half
// a message's β, as on the boards); the senders' copies overlap its reads.
double reduce_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  const LinkCost& link = l.flat();
  return link.alpha + (l.ranks - 1) * q.bytes * (link.beta / 2 + link.gamma);
}

const AlgorithmRegistrar kDirect{AlgorithmInfo{
    "direct",
    "every block straight to the rank that needs it: gather, scatter, all-to-all, reduce, "
    "broadcast",
    {{Collective::allgather, direct_allgather},
     {Collective::gather, direct_gather},
     {Collective::reduce, direct_reduce},
     {Collective::scatter, direct_scatter},
     {Collective::alltoall, direct_alltoallv},
     {Collective::alltoallv, direct_alltoallv},
     {Collective::broadcast, direct_broadcast}},
    {{Collective::broadcast, broadcast_cost},
     {Collective::allgather, blocks_cost},
     {Collective::gather, blocks_cost},
     {Collective::scatter, blocks_cost},
     {Collective::alltoall, blocks_cost},
     {Collective::reduce, reduce_cost}}}};

}  // namespace
}  // namespace arcoll
