// Recursive doubling all-reduce: in round k every rank exchanges its whole partial result
// with rank ^ 2^k and reduces, so log2(p) rounds of one message each: the latency-optimal
// choice for small messages (the ring needs 2(p-1) rounds). A world that is not a power of
// two first folds its extra ranks into partners and hands them the result at the end
// (MPICH's and Open MPI's way). Every rank applies the same reductions in the same grouping,
// so all end with identical bits.
#include <cstring>

#include "algorithms/algorithm.hpp"

namespace arcoll {
namespace {

void recursive_doubling_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t bytes = a.count * size_of(a.type);
  if (a.recv != a.send && bytes != 0) std::memcpy(a.recv, a.send, bytes);
  const int p = p2p.size();
  if (p == 1 || bytes == 0) return;
  const int rank = p2p.rank();
  int pof2 = 1;
  while (pof2 * 2 <= p) pof2 *= 2;
  const int extra = p - pof2;  // ranks 0..2*extra-1 pair up; the even ones sit out
  char* out = static_cast<char*>(a.recv);
  // What a rank sends must not change while it is being sent, and `out` is reduced into as
  // the partner's message arrives: sends go from a copy.
  char* outgoing = static_cast<char*>(p2p.scratch(bytes, 0));

  int virtual_rank;
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      p2p.wait(p2p.isend(rank + 1, out, bytes));
      p2p.wait(p2p.irecv(rank + 1, out, bytes));  // the result
      return;
    }
    p2p.wait(p2p.irecv_reduce(rank - 1, out, out, a.count, a.type, a.op));
    virtual_rank = rank / 2;
  } else {
    virtual_rank = rank - extra;
  }
  auto real_rank = [&](int v) { return v < extra ? v * 2 + 1 : v + extra; };
  for (int mask = 1; mask < pof2; mask *= 2) {
    const int partner = real_rank(virtual_rank ^ mask);
    std::memcpy(outgoing, out, bytes);
    RequestPtr send = p2p.isend(partner, outgoing, bytes);
    p2p.wait(p2p.irecv_reduce(partner, out, out, a.count, a.type, a.op));
    p2p.wait(send);
  }
  if (rank < 2 * extra) p2p.wait(p2p.isend(rank - 1, out, bytes));
}

const AlgorithmRegistrar kRecursiveDoubling{
    AlgorithmInfo{"recursive_doubling",
                  "log2(p) rounds exchanging the whole buffer with rank ^ 2^k (small messages)",
                  {{Collective::allreduce, recursive_doubling_allreduce}}}};

}  // namespace
}  // namespace arcoll
