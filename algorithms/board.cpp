// All-reduce on the shared boards (PointToPoint::exchange_on_boards): every rank posts its
// whole buffer and reduces everyone's, with no message. Where all ranks share memory, a
// small all-reduce then costs one exchange of cache lines instead of log2(p) rounds of
// matched messages (UCC's shared-memory team and Open MPI's fastboxes do the same for their
// small messages). Every rank reduces the parts in rank order: all end with identical bits.
#include <limits>

#include "algorithms/algorithm.hpp"
#include "algorithms/cost_model.hpp"
#include "base/reduce.hpp"

namespace arcoll {
namespace {

void board_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  if (allreduce_is_local(p2p, a)) return;
  const std::size_t bytes = a.count * size_of(a.type);
  if (bytes > p2p.board_capacity()) {
    // Too large for the boards, or there are none: the model's choice among the other flat
    // algorithms (cost::predict predicts that).
    Layout without_boards = p2p.layout();
    without_boards.board_capacity = 0;
    const Plan plan = cost::best(without_boards, static_cast<double>(bytes), /*flat_only=*/true);
    (*find_collective(plan.algorithm, Collective::allreduce))(p2p, a);
    return;
  }
  const auto parts = p2p.exchange_on_boards(a.send, bytes);
  kernels::reduce(a.recv, parts[0], parts[1], a.count, a.type, a.op);
  for (std::size_t r = 2; r < parts.size(); ++r)
    kernels::reduce(a.recv, a.recv, parts[r], a.count, a.type, a.op);
}

// One exchange of cache lines: half a step of messages, with no entry to write or match. The
// part's copy costs a message's β, not a copy's: its lines are taken back from the peers that
// read them two calls before (measured on 2 ranks: the boards lose to one round of recursive
// doubling from 4-8 KiB, not only past their capacity). Then p - 1 parts are read and reduced;
// a read is half a message's β.
double board_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.board_capacity == 0 || q.bytes > static_cast<double>(l.board_capacity))
    return std::numeric_limits<double>::infinity();
  const double others = l.ranks - 1;
  const LinkCost& c = l.intra;
  return 0.5 * c.alpha + q.bytes * c.beta + others * q.bytes * (c.beta / 2 + c.gamma);
}

const AlgorithmRegistrar kBoard{AlgorithmInfo{
    "board",
    "every rank posts its buffer on the shared boards and reduces all (small, one host)",
    {{Collective::allreduce, board_allreduce}},
    board_cost}};

}  // namespace
}  // namespace arcoll
