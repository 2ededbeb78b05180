// Recursive doubling all-reduce: in round k every rank exchanges its whole partial result
// with rank ^ 2^k and reduces, so log2(p) rounds of one message each: the latency-optimal
// choice for small messages (the ring needs 2(p-1) rounds). Every rank applies the same
// reductions to the same values in the same grouping, so all end with identical bits.

#include "algorithms/cost_model.hpp"
#include "algorithms/fold.hpp"

namespace arcoll {
namespace {

void recursive_doubling_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  char* out = static_cast<char*>(a.recv);
  // Never written: every round writes the result or the spare buffer below.
  char* in = static_cast<char*>(const_cast<void*>(a.send));
  if (p2p.size() == 1 || bytes == 0) {
    p2p.copy(out, in, bytes);
    return;
  }
  // A 16-bit wire rounds this rank's own partial result, which must not be the caller's input.
  if (p2p.rounds_to_wire(a.type) && in != out) {
    p2p.copy(out, in, bytes);
    in = out;
  }
  const PowerOfTwoFold fold(p2p);
  if (!fold.fold(p2p, in, out, a.count, a.type, a.op)) return;
  char* partial = fold.folded_in() ? out : in;
  // What a rank sends must not change while it is being sent: each round reduces the
  // partner's partial result and this rank's into the other of two buffers (the result and a
  // spare one), so that no round copies what it sends. Starting from the caller's input, the
  // first target is chosen so that the last round lands in the result.
  char* spare = static_cast<char*>(p2p.scratch(bytes, 0));
  int rounds_left = cost::floor_log2(fold.virtual_size());
  for (int mask = 1; mask < fold.virtual_size(); mask *= 2, --rounds_left) {
    // Both partners then add the same two values (a 16-bit wire would round only the copy
    // each receives, and the ranks would end with different bits).
    p2p.round_to_wire(partial, a.count, a.type);
    char* target = partial == out ? spare
                   : partial == spare ? out
                   : rounds_left % 2 == 1 ? out
                                          : spare;
    exchange(p2p, fold.real_rank(fold.virtual_rank() ^ mask), partial, bytes, target, partial,
             a.count, a.type, a.op, /*reduce=*/true);
    partial = target;
  }
  p2p.copy(out, partial, bytes);
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
