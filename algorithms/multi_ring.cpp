// Multi-channel ring: the buffer split into k parts, each all-reduced by its own ring on its
// own channel (its own message stream), all k advancing together. Odd channels run the ring
// backwards, so that the link from rank r to r+1 and the one from r+1 to r are both busy (full
// duplex), as NCCL's channels spread over NICs and directions. k is Options::channels
// (ARCOLL_CHANNELS).
#include "algorithms/group.hpp"
#include "algorithms/ring.hpp"

namespace arcoll {
namespace {

void multi_ring_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const int channels = std::max(1, std::min(p2p.layout().channels, kMaxChannels));
  const std::size_t elem = size_of(a.type);
  const ring::Segments parts = ring::Segments::balanced(a.count, channels);
  const std::vector<int> forward = ring::host_order(p2p);
  const std::vector<int> backward(forward.rbegin(), forward.rend());
  std::vector<GroupView> views;
  views.reserve(static_cast<std::size_t>(channels));
  std::vector<std::unique_ptr<ring::Pass>> passes;
  for (int c = 0; c < channels; ++c) {
    views.emplace_back(p2p, c % 2 == 0 ? forward : backward, c);
    passes.push_back(ring::allreduce(views.back(), parts.count(c), a.type, a.op,
                                     static_cast<const char*>(a.send) + parts.begin(c) * elem,
                                     static_cast<char*>(a.recv) + parts.begin(c) * elem));
  }
  ring::run_together(passes);
}

// Each ring moves 1/k of the data in the same number of steps: k times the messages. The
// rings share each link, and a ring's step waits behind the other rings' messages on it: one
// more message time per step for each further ring (where no transport gives a channel a
// connection of its own, UCX's one endpoint per pair, they gain nothing else; measured, the
// rings were never ahead of one ring over shm, tcp or ucx).
double multi_ring_cost(const CostQuery& q) {
  const int k = std::max(1, q.layout.channels);
  const LinkCost& link = q.layout.flat();
  return k * ring::allreduce_cost(q.layout.ranks, q.bytes / k, link, q.layout.chunk_bytes) +
         (k - 1) * 2.0 * (q.layout.ranks - 1) * link.alpha;
}

const AlgorithmRegistrar kMultiRing{AlgorithmInfo{
    "multi_ring",
    "k rings (ARCOLL_CHANNELS), each on its part of the buffer and its own channel, odd ones "
    "backwards",
    {{Collective::allreduce, multi_ring_allreduce}},
    {{Collective::allreduce, multi_ring_cost}}}};

}  // namespace
}  // namespace arcoll
