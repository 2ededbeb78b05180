// Dissemination barrier: in round k every rank signals rank+2^k and hears from rank-2^k;
// after ceil(log2 p) rounds every rank has heard, directly or not, from every other.
#include "algorithms/algorithm.hpp"

namespace arcoll {
namespace {

void dissemination_barrier(PointToPoint& p2p, const CollectiveArgs&) {
  const int p = p2p.size();
  const int r = p2p.rank();
  char out = 0;
  char in = 0;
  for (int distance = 1; distance < p; distance *= 2) {
    RequestPtr send = p2p.isend((r + distance) % p, &out, 1);
    p2p.wait(p2p.irecv((r - distance + p) % p, &in, 1));
    p2p.wait(send);
  }
}

const AlgorithmRegistrar kDissemination{
    AlgorithmInfo{"dissemination",
                  "log2(p) rounds of one-byte signals (barrier)",
                  {{Collective::barrier, dissemination_barrier}},
                  /*costs=*/{}}};

}  // namespace
}  // namespace arcoll
