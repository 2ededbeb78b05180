// Power-of-two algorithms on any world size, the way MPICH and Open MPI do it: with
// extra = p - 2^floor(log2 p), ranks 0..2*extra-1 pair up; the even rank of each pair hands
// its buffer to the odd one, which reduces it in and stands for both among the 2^k virtual
// ranks; at the end the odd one hands the result back.
#pragma once

#include "algorithms/algorithm.hpp"

namespace arcoll {

class PowerOfTwoFold {
 public:
  explicit PowerOfTwoFold(const PointToPoint& p2p)
      : rank_(p2p.rank()), pof2_(cost::floor_pof2(p2p.size())), extra_(p2p.size() - pof2_) {}

  int virtual_size() const { return pof2_; }
  // This rank among the 2^k, or -1 while it sits out.
  int virtual_rank() const {
    if (rank_ >= 2 * extra_) return rank_ - extra_;
    return rank_ % 2 == 1 ? rank_ / 2 : -1;
  }
  int real_rank(int virtual_rank) const {
    return virtual_rank < extra_ ? virtual_rank * 2 + 1 : virtual_rank + extra_;
  }

  // Folds `out` (count elements) into the partner. A rank that sits out gets the result in
  // `out` when this returns false; the others go on and call unfold() at the end.
  bool fold(PointToPoint& p2p, char* out, std::size_t count, DataType type, ReduceOp op) const {
    if (rank_ >= 2 * extra_) return true;
    if (rank_ % 2 == 0) {
      const std::size_t bytes = count * size_of(type);
      p2p.wait(p2p.isend(rank_ + 1, out, bytes));
      p2p.wait(p2p.irecv(rank_ + 1, out, bytes));
      return false;
    }
    p2p.wait(p2p.irecv_reduce(rank_ - 1, out, out, count, type, op));
    return true;
  }
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
