// Recursive halving-doubling all-reduce (Rabenseifner): a reduce-scatter by recursive halving
// (round k: keep half of the current range, send the other half to rank ^ 2^(K-k), reduce
// what comes back), then an all-gather by recursive doubling in the reverse order. 2 log2(p)
// messages and the ring's 2(p-1)/p of the data: between recursive doubling (small) and the
// ring (large). Extra ranks of non-power-of-two worlds are folded in and out.
#include <cstring>

#include "algorithms/cost_model.hpp"
#include "algorithms/fold.hpp"

namespace arcoll {
namespace {

struct Range {
  std::size_t begin, end;  // elements
};

void halving_doubling_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  if (allreduce_is_local(p2p, a)) return;
  const std::size_t elem = size_of(a.type);
  const auto* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  const PowerOfTwoFold fold(p2p);
  if (!fold.fold(p2p, in, out, a.count, a.type, a.op)) return;
  // Where this rank's partial result is: the input until a reduction first lands in `out`
  // (no copy of the input: the first round reads it where it is).
  const char* held_data = fold.folded_in() ? out : in;
  const int me = fold.virtual_rank();
  // Ranges held after each halving round, to retrace in the doubling rounds.
  std::vector<Range> held{{0, a.count}};
  for (int mask = fold.virtual_size() / 2; mask >= 1; mask /= 2) {
    const Range r = held.back();
    const std::size_t middle = r.begin + (r.end - r.begin) / 2;
    const bool lower = (me & mask) == 0;
    const Range keep = lower ? Range{r.begin, middle} : Range{middle, r.end};
    const Range give = lower ? Range{middle, r.end} : Range{r.begin, middle};
    // Disjoint halves: what is sent is not what is reduced into.
    exchange(p2p, fold.real_rank(me ^ mask), held_data + give.begin * elem,
             (give.end - give.begin) * elem, out + keep.begin * elem,
             held_data + keep.begin * elem, keep.end - keep.begin, a.type, a.op,
             /*reduce=*/true);
    held_data = out;
    held.push_back(keep);
  }
  for (int mask = 1; mask < fold.virtual_size(); mask *= 2) {
    const Range mine = held.back();
    held.pop_back();
    const Range whole = held.back();
    const Range theirs =
        (me & mask) == 0 ? Range{mine.end, whole.end} : Range{whole.begin, mine.begin};
    exchange(p2p, fold.real_rank(me ^ mask), out + mine.begin * elem,
             (mine.end - mine.begin) * elem, out + theirs.begin * elem, nullptr,
             theirs.end - theirs.begin, a.type, a.op, /*reduce=*/false);
  }
  fold.unfold(p2p, out, a.count * elem);
}

// Round with distance m moves (and, halving, reduces) m/2^K of the data each way, in chunks.
double halving_doubling_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  const int pof2 = cost::floor_pof2(l.ranks);
  double seconds = PowerOfTwoFold::cost(l.ranks, q.bytes, cost::exchange_link(l, 1));
  for (int mask = 1; mask < pof2; mask *= 2) {
    const LinkCost link = cost::exchange_link(l, mask);
    const double part = q.bytes * mask / pof2;
    seconds += 2 * (chunks_of(part, l.chunk_bytes) * link.alpha + part * link.beta) +
               part * link.gamma;
  }
  return seconds;
}

const AlgorithmRegistrar kHalvingDoubling{AlgorithmInfo{
    "halving_doubling",
    "reduce-scatter by recursive halving, all-gather by recursive doubling (Rabenseifner)",
    {{Collective::allreduce, halving_doubling_allreduce}},
    halving_doubling_cost}};

}  // namespace
}  // namespace arcoll
