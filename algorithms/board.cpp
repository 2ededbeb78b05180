// All-reduce on the shared boards (PointToPoint::exchange_on_boards): every rank posts its
// whole buffer and reduces everyone's, with no message. Where all ranks share memory, a
// small all-reduce then costs one exchange of cache lines instead of log2(p) rounds of
// matched messages (UCC's shared-memory team and Open MPI's fastboxes do the same for their
// small messages). Every rank reduces the parts in rank order: all end with identical bits.
//
// The other collectives meet there too while what a rank posts fits (its buffer, or the
// root's whole buffer): a small call of any kind is one exchange of cache lines, where by
// messages it is a round or several of matched sends. Beyond that, or with no boards, they go
// by messages (kByMessages).
#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "algorithms/algorithm.hpp"
#include "algorithms/cost_model.hpp"
#include "src/base/reduce.hpp"

namespace arcoll {
namespace {

// Reduces the parts' (two or more) `count` elements from byte `offset` into `out`, in rank
// order, so that every rank that reduces ends with identical bits.
void reduce_parts(void* out, std::span<const std::byte* const> parts, std::size_t offset,
                  const CollectiveArgs& a) {
  kernels::reduce(out, parts[0] + offset, parts[1] + offset, a.count, a.type, a.op);
  for (std::size_t r = 2; r < parts.size(); ++r)
    kernels::reduce(out, out, parts[r] + offset, a.count, a.type, a.op);
}

// The algorithm each collective but reduce goes by beyond the boards.
const std::map<Collective, const char*> kByMessages = {
    {Collective::reduce_scatter, "ring"}, {Collective::allgather, "direct"},
    {Collective::broadcast, "ring"},      {Collective::gather, "direct"},
    {Collective::scatter, "direct"},      {Collective::alltoall, "direct"},
};
// A reduce goes straight to the root (direct) on 2 ranks, and on more while the root receives
// at most this much in all ((p-1) buffers); larger ones reduce-scatter first and gather to the
// root: by halving-doubling from kHalvingReduceBytes, else by the ring. On 2 ranks direct, in
// chunks that the root reduces as they land, took 0.47-0.74 of halving-doubling's time at 1, 4
// and 16 MiB over shm, UCX and tcp (2 cores of an Intel Xeon; before the chunks, whole
// messages past the cache made it lose from 2 MiB), 0.57-0.91 between 2 emulated hosts.
// Medians of 4-6 interleaved jobs on 2 cores of an AMD EPYC, shm: on 4 ranks direct took 49-84
// against 83-131 us at 512 KiB (ring); at 2 MiB on 4 ranks the ring took 424-621 us,
// halving-doubling 882-1317, at 16 MiB 8.5-9.1 ms against 6.0-7.1, at 32 MiB 17.3-18.1
// against 12.2-12.9.
constexpr std::size_t kDirectReduceBytes = 1536 * 1024;
constexpr std::size_t kHalvingReduceBytes = 16 << 20;

// A broadcast over shm on more than 2 ranks goes straight from the root up to this size. 2
// cores of an Intel Xeon, medians of 5 interleaved runs, out of place / in place, chain ->
// direct: 4 ranks 16 KiB -15%/-27%, 32 KiB -23%/-32%, 128 KiB -6%/-17%, 256 KiB +19%/+6%; 3
// ranks 8-512 KiB -29% to +1%; 8 ranks 8-64 KiB -21% to -50%, 128 KiB +10%/-13%.
constexpr std::size_t kDirectBroadcastBytes = 128 * 1024;

// A broadcast on more than 2 ranks of one host goes straight from the root where the ranks read
// it in parallel (LinkCost::fans_out): UCX on 4 ranks, 2 cores of an Intel Xeon, three runs
// each, the chain against direct: 64 KiB 36-38 against 22-23 us, 1 MiB 411-495 against
// 337-405, 16 MiB 13.3-14.5 against 12.1-12.5 ms; on 8 ranks, two runs, 1 MiB 808-867
// against 608-687 us, 16 MiB alike; on 3, alike but at 4 MiB (1.1-1.8 against 1.5-2.0 ms).
// Over shm (the ranks share boards) the chain's hops cost less than the reads in parallel from
// 256 KiB (4 ranks, 4 MiB: 1.1-1.5 against 2.3-2.5 ms), and more up to kDirectBroadcastBytes,
// where each hop adds a rank's wake-up to the call. Over tcp the chain wins (4 ranks, 3 runs,
// chain -> direct: 8 KiB +22%/+38%, 32 KiB -30%/+12%, 128 KiB +28%/+44%, 512 KiB +46%/+48%).
const char* by_messages(Collective collective, std::size_t posted, int ranks,
                        const Layout& layout) {
  const bool shares_boards = layout.board_capacity > 0;
  if (collective == Collective::broadcast && layout.hosts == 1 && ranks > 2 &&
      (layout.intra.fans_out || (shares_boards && posted <= kDirectBroadcastBytes)))
    return "direct";
  if (collective != Collective::reduce) return kByMessages.at(collective);
  if (ranks == 2 || static_cast<std::size_t>(ranks - 1) * posted <= kDirectReduceBytes)
    return "direct";
  return posted >= kHalvingReduceBytes ? "halving_doubling" : "ring";
}

// The most a rank posts for a collective other than all-reduce: past it messages win (2 ranks
// of an Intel Xeon, busbw on the boards against by messages: all-gather of 8 KiB, 4 KiB
// posted a rank, 4.8 against 5.2 GB/s, of 16 KiB 5.5 against 7.0; reduce-scatter, which posts
// its whole buffer, still 7.4 against 7.2 at 16 KiB). All-reduce's limit comes from the model.
constexpr std::size_t kPostedBytes = 4096;

// Whether a call whose rank posts `posted` bytes (posted_bytes) meets on the boards rather than
// by messages: all-reduce while it fits, the others also up to kPostedBytes.
bool meets_on_boards(Collective collective, const PointToPoint& p2p, std::size_t posted) {
  if (collective == Collective::allreduce) return posted <= p2p.board_capacity();
  return p2p.size() > 1 && posted <= std::min(p2p.board_capacity(), kPostedBytes);
}

// The largest part a rank posts for `collective` (the root's buffer of a scatter, the whole
// input of a reduce-scatter or all-to-all, else its buffer).
std::size_t posted_bytes(Collective collective, const CollectiveArgs& a, int ranks) {
  const std::size_t bytes = a.count * size_of(a.type);
  const bool whole_input = collective == Collective::reduce_scatter ||
                           collective == Collective::alltoall || collective == Collective::scatter;
  return whole_input ? bytes * static_cast<std::size_t>(ranks) : bytes;
}

// Runs `on_boards` when the largest part a rank posts (posted_bytes) fits on the boards and
// kPostedBytes; else (one rank, no boards) the collective by messages. Every rank decides
// alike. A call of no elements moves nothing (its buffers may be null).
template <class OnBoards>
void on_boards_or_by_messages(Collective collective, PointToPoint& p2p, const CollectiveArgs& a,
                              OnBoards on_boards) {
  const std::size_t posted = posted_bytes(collective, a, p2p.size());
  if (posted == 0) return;
  if (!meets_on_boards(collective, p2p, posted)) {
    const char* algorithm = by_messages(collective, posted, p2p.size(), p2p.layout());
    (*find_collective(algorithm, collective))(p2p, a);
    return;
  }
  on_boards();
}

void board_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  if (allreduce_is_local(p2p, a)) return;
  const std::size_t bytes = a.count * size_of(a.type);
  if (!meets_on_boards(Collective::allreduce, p2p, bytes)) {
    // Too large for the boards, or there are none: the model's choice among the other flat
    // algorithms (cost::predict predicts that).
    Layout without_boards = p2p.layout();
    without_boards.board_capacity = 0;
    const Plan plan = cost::best(without_boards, static_cast<double>(bytes), /*flat_only=*/true);
    (*find_collective(plan.algorithm, Collective::allreduce))(p2p, a);
    return;
  }
  reduce_parts(a.recv, p2p.exchange_on_boards(a.send, bytes), 0, a);
}

// Whether a call meets on the boards, where its buffers are read and written with the host.
bool board_reads_buffers(Collective collective, const PointToPoint& p2p, const CollectiveArgs& a) {
  if (collective == Collective::allreduce && (p2p.size() == 1 || a.count == 0)) return false;
  const std::size_t posted = posted_bytes(collective, a, p2p.size());
  return posted != 0 && meets_on_boards(collective, p2p, posted);
}

void board_reduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  on_boards_or_by_messages(Collective::reduce, p2p, a, [&] {
    const auto parts = p2p.exchange_on_boards(a.send, bytes);
    if (p2p.rank() == a.root) reduce_parts(a.recv, parts, 0, a);
  });
}

void board_reduce_scatter(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t block = a.count * size_of(a.type);
  const std::size_t bytes = block * static_cast<std::size_t>(p2p.size());
  on_boards_or_by_messages(Collective::reduce_scatter, p2p, a, [&] {
    const auto parts = p2p.exchange_on_boards(a.send, bytes);
    reduce_parts(a.recv, parts, block * static_cast<std::size_t>(p2p.rank()), a);
  });
}

// Copies block `from` of each part (all of it: from < 0) to block r of `out`.
void gather_parts(void* out, std::span<const std::byte* const> parts, std::size_t block,
                  std::ptrdiff_t from) {
  for (std::size_t r = 0; r < parts.size(); ++r)
    std::memcpy(static_cast<char*>(out) + r * block,
                parts[r] + (from < 0 ? 0 : static_cast<std::size_t>(from) * block), block);
}

void board_allgather(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t block = a.count * size_of(a.type);
  on_boards_or_by_messages(Collective::allgather, p2p, a, [&] {
    gather_parts(a.recv, p2p.exchange_on_boards(a.send, block), block, -1);
  });
}

void board_gather(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t block = a.count * size_of(a.type);
  on_boards_or_by_messages(Collective::gather, p2p, a, [&] {
    const auto parts = p2p.exchange_on_boards(a.send, block);
    if (p2p.rank() == a.root) gather_parts(a.recv, parts, block, -1);
  });
}

void board_alltoall(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t block = a.count * size_of(a.type);
  const std::size_t bytes = block * static_cast<std::size_t>(p2p.size());
  on_boards_or_by_messages(Collective::alltoall, p2p, a, [&] {
    gather_parts(a.recv, p2p.exchange_on_boards(a.send, bytes), block, p2p.rank());
  });
}

// The root posts its buffer, the others nothing; each copies its block (broadcast: all of it).
void board_broadcast(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  on_boards_or_by_messages(Collective::broadcast, p2p, a, [&] {
    const bool root = p2p.rank() == a.root;
    const auto parts = p2p.exchange_on_boards(a.recv, root ? bytes : 0);
    if (!root) std::memcpy(a.recv, parts[static_cast<std::size_t>(a.root)], bytes);
  });
}

void board_scatter(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t block = a.count * size_of(a.type);
  const std::size_t bytes = block * static_cast<std::size_t>(p2p.size());
  on_boards_or_by_messages(Collective::scatter, p2p, a, [&] {
    const bool root = p2p.rank() == a.root;
    const auto parts = p2p.exchange_on_boards(a.send, root ? bytes : 0);
    std::memmove(
        a.recv,
        parts[static_cast<std::size_t>(a.root)] + block * static_cast<std::size_t>(p2p.rank()),
        block);
  });
}

// One exchange of cache lines: half a step of messages, with no entry to write or match. The
// part's copy costs a message's β, not a copy's: its lines are taken back from the peers that
// read them two calls before (measured on 2 ranks: the boards lose to one round of recursive
// doubling from 4-8 KiB, not only past their capacity). Then p - 1 parts are read and reduced;
// a read is half a message's β.
struct BoardTraffic {
  double posted = 0;  // bytes a rank posts
  double read = 0;    // bytes the busiest rank reads from the others' parts
  bool reduced = false;
};

BoardTraffic board_traffic(Collective collective, double bytes, int ranks) {
  const double p = ranks, block = bytes / p;
  switch (collective) {
    case Collective::allreduce:
    case Collective::reduce:
      return {bytes, (p - 1) * bytes, true};
    case Collective::reduce_scatter:
      return {bytes, (p - 1) * block, true};
    case Collective::allgather:
    case Collective::gather:
      return {block, (p - 1) * block, false};
    case Collective::alltoall:
      return {bytes, (p - 1) * block, false};
    case Collective::broadcast:
      return {bytes, bytes, false};
    case Collective::scatter:
      return {bytes, block, false};
    default:
      return {};
  }
}

double on_boards_cost(const LinkCost& c, const BoardTraffic& t) {
  return 0.5 * c.alpha + t.posted * c.beta + t.read * (c.beta / 2 + (t.reduced ? c.gamma : 0));
}

double board_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.board_capacity == 0 || q.bytes > static_cast<double>(l.board_capacity))
    return std::numeric_limits<double>::infinity();
  return on_boards_cost(l.intra, board_traffic(Collective::allreduce, q.bytes, l.ranks));
}

// The other collectives as board_reduce and the rest run them: on the boards while what a rank
// posts fits, else the algorithm they go by beyond them.
CostFn board_cost_of(Collective collective) {
  return [collective](const CostQuery& q) {
    const Layout& l = q.layout;
    const BoardTraffic traffic = board_traffic(collective, q.bytes, l.ranks);
    const auto posted = static_cast<std::size_t>(traffic.posted);
    if (posted == 0) return 0.0;
    if (l.ranks > 1 && posted <= std::min(l.board_capacity, kPostedBytes))
      return on_boards_cost(l.intra, traffic);
    Layout without_boards = l;
    without_boards.board_capacity = 0;
    return cost::predict(by_messages(collective, posted, l.ranks, l), without_boards, q.bytes,
                         collective)
        .seconds;
  };
}

const AlgorithmRegistrar kBoard{AlgorithmInfo{
    "board",
    "every rank posts its buffer on the shared boards and reduces or copies what it needs "
    "(small calls, one host)",
    {{Collective::allreduce, board_allreduce},
     {Collective::reduce, board_reduce},
     {Collective::reduce_scatter, board_reduce_scatter},
     {Collective::allgather, board_allgather},
     {Collective::gather, board_gather},
     {Collective::alltoall, board_alltoall},
     {Collective::broadcast, board_broadcast},
     {Collective::scatter, board_scatter}},
    {{Collective::allreduce, board_cost},
     {Collective::reduce, board_cost_of(Collective::reduce)},
     {Collective::reduce_scatter, board_cost_of(Collective::reduce_scatter)},
     {Collective::allgather, board_cost_of(Collective::allgather)},
     {Collective::gather, board_cost_of(Collective::gather)},
     {Collective::alltoall, board_cost_of(Collective::alltoall)},
     {Collective::broadcast, board_cost_of(Collective::broadcast)},
     {Collective::scatter, board_cost_of(Collective::scatter)}},
    /*chunked=*/false,
    /*composite=*/false,
    board_reads_buffers}};

}  // namespace
}  // namespace arcoll
