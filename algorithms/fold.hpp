// Power-of-two algorithms on any world size, the way MPICH and Open MPI do it: with
// extra = p - 2^floor(log2 p), ranks 0..2*extra-1 pair up; the even rank of each pair hands
// its buffer to the odd one, which reduces it in and stands for both among the 2^k virtual
// ranks; at the end the odd one hands the result back.
#pragma once

#include <algorithm>
#include <array>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "algorithms/cost_model.hpp"

namespace arcoll {

// The call's pipeline chunk in bytes, cut to whole elements of `elem` bytes (at least one).
inline std::size_t chunk_in_elements(const PointToPoint& p2p, std::size_t elem) {
  return std::max<std::size_t>(1, p2p.chunk_bytes() / elem) * elem;
}

// One exchange with `partner`: `send_bytes` from `send` go out while `recv_count` elements
// come in, reduced into `recv` (with `with`) when `reduce`, else copied. Both directions are
// cut into pipeline chunks, all posted at once, so that the transport overlaps moving one
// chunk with reducing the one before, as the ring does. `recv` must not overlap `send` (which
// may be `with`).
inline void exchange(PointToPoint& p2p, int partner, const char* send, std::size_t send_bytes,
                     char* recv, const char* with, std::size_t recv_count, DataType type,
                     ReduceOp op, bool reduce) {
  const std::size_t elem = size_of(type);
  const std::size_t chunk = chunk_in_elements(p2p, elem);
  const std::size_t recv_bytes = recv_count * elem;
  auto receive = [&](std::size_t offset, std::size_t n) {
    return reduce ? p2p.irecv_reduce(partner, recv + offset, with + offset, n / elem, type, op)
                  : p2p.irecv(partner, recv + offset, n);
  };
  // Receives are posted before sends: a message that comes at once then lands where it goes
  // instead of being held aside first.
  if (send_bytes <= chunk && recv_bytes <= chunk) {
    // One message each way, as small exchanges are: nothing to allocate.
    // (A braced list is evaluated in order.)
    const std::array<RequestPtr, 2> requests{receive(0, recv_bytes),
                                             p2p.isend(partner, send, send_bytes)};
    p2p.wait_all(requests);
    return;
  }
  std::vector<RequestPtr> requests;
  std::size_t offset = 0;
  do {
    const std::size_t n = std::min(chunk, recv_bytes - offset);
    requests.push_back(receive(offset, n));
    offset += n;
  } while (offset < recv_bytes);
  offset = 0;
  do {
    const std::size_t n = std::min(chunk, send_bytes - offset);
    requests.push_back(p2p.isend(partner, send + offset, n));
    offset += n;
  } while (offset < send_bytes);
  p2p.wait_all(requests);
}

class PowerOfTwoFold {
 public:
  explicit PowerOfTwoFold(const PointToPoint& p2p)
      : rank_(p2p.rank()), pof2_(cost::floor_pof2(p2p.size())), extra_(p2p.size() - pof2_) {}

  int virtual_size() const { return pof2_; }
  // This rank among the 2^k, or -1 while it sits out.
  int virtual_rank() const { return virtual_rank_of(rank_); }
  int virtual_rank_of(int rank) const {
    if (rank >= 2 * extra_) return rank - extra_;
    return rank % 2 == 1 ? rank / 2 : -1;
  }
  int real_rank(int virtual_rank) const {
    return virtual_rank < extra_ ? virtual_rank * 2 + 1 : virtual_rank + extra_;
  }

  // Folds this rank's `input` into the partner's `output` (count elements each; they may be
  // the same buffer). A rank that sits out gets the result in `output` when this returns
  // false; the others go on and call unfold() at the end.
  bool fold(PointToPoint& p2p, const char* input, char* output, std::size_t count, DataType type,
            ReduceOp op) const {
    if (fold_in(p2p, input, output, count, type, op)) return true;
    p2p.wait(p2p.irecv(rank_ + 1, output, count * size_of(type)));
    return false;
  }
  // fold() for a result that goes to one rank (a reduce): a rank that sits out hands its input
  // over and gets nothing back (false).
  bool fold_in(PointToPoint& p2p, const char* input, char* output, std::size_t count,
               DataType type, ReduceOp op) const {
    if (rank_ >= 2 * extra_) return true;
    if (rank_ % 2 == 0) {
      p2p.wait(p2p.isend(rank_ + 1, input, count * size_of(type)));
      return false;
    }
    p2p.wait(p2p.irecv_reduce(rank_ - 1, output, input, count, type, op));
    return true;
  }
  // Whether fold() left this rank's partial result in `output` (else it is still `input`).
  bool folded_in() const { return rank_ < 2 * extra_; }
  void unfold(PointToPoint& p2p, const char* out, std::size_t bytes) const {
    if (rank_ < 2 * extra_) p2p.wait(p2p.isend(rank_ - 1, out, bytes));
  }

  // What folding adds to a time: the whole buffer sent and reduced in, and sent back.
  static double cost(int ranks, double bytes, const LinkCost& link) {
    if (ranks == cost::floor_pof2(ranks)) return 0;
    return 2 * (link.alpha + bytes * link.beta) + bytes * link.gamma;
  }

 private:
  int rank_, pof2_, extra_;
};

}  // namespace arcoll
