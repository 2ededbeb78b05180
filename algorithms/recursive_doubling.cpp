// Recursive doubling all-reduce: in round k every rank exchanges its whole partial result
// with rank ^ 2^k and reduces, so log2(p) rounds of one message each: the latency-optimal
// choice for small messages (the ring needs 2(p-1) rounds). Every rank applies the same
// reductions to the same values in the same grouping, so all end with identical bits.
#include <cstring>

#include "algorithms/cost_model.hpp"
#include "algorithms/fold.hpp"

namespace arcoll {
namespace {

void recursive_doubling_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  if (a.recv != a.send && bytes != 0) std::memcpy(a.recv, a.send, bytes);
  if (p2p.size() == 1 || bytes == 0) return;
  char* out = static_cast<char*>(a.recv);
  const PowerOfTwoFold fold(p2p);
  if (!fold.fold(p2p, out, out, a.count, a.type, a.op)) return;
  // What a rank sends must not change while it is being sent, and `out` is reduced into as
  // the partner's message arrives: sends go from a copy.
  char* outgoing = static_cast<char*>(p2p.scratch(bytes, 0));
  for (int mask = 1; mask < fold.virtual_size(); mask *= 2) {
    // Both partners then add the same two values (a 16-bit wire would round only the copy
    // each receives, and the ranks would end with different bits).
    p2p.round_to_wire(out, a.count, a.type);
    std::memcpy(outgoing, out, bytes);
    exchange(p2p, fold.real_rank(fold.virtual_rank() ^ mask), outgoing, bytes, out, out, a.count,
             a.type, a.op, /*reduce=*/true);
  }
  fold.unfold(p2p, out, bytes);
}

// log2(p) rounds of the whole buffer.
double recursive_doubling_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  double seconds = PowerOfTwoFold::cost(l.ranks, q.bytes, cost::exchange_link(l, 1));
  for (int mask = 1; mask < cost::floor_pof2(l.ranks); mask *= 2) {
    const LinkCost link = cost::exchange_link(l, mask);
    seconds += cost::chunks_of(q.bytes, l.chunk_bytes) * link.alpha + q.bytes * (link.beta + link.gamma);
  }
  return seconds;
}

const AlgorithmRegistrar kRecursiveDoubling{
    AlgorithmInfo{"recursive_doubling",
                  "log2(p) rounds exchanging the whole buffer with rank ^ 2^k (small messages)",
                  {{Collective::allreduce, recursive_doubling_allreduce}},
                  {{Collective::allreduce, recursive_doubling_cost}}}};

}  // namespace
}  // namespace arcoll
