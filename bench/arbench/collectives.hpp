// The collectives arbench measures (--coll), each as nccl-tests measures it with the binary of
// its name: a row's size is the largest buffer a rank holds (all-gather's whole output,
// reduce-scatter's whole input), its count the elements of that size, and busbw is algbw times
// nccl-tests' factor for the collective, so that figures compare across world sizes and with
// nccl-tests' own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace arbench {

enum class Coll : std::uint8_t {
  allreduce,
  allgather,
  reduce_scatter,
  broadcast,
  reduce,
  alltoall,
  gather,
  scatter,
  sendrecv,
};
inline constexpr Coll kAllColls[] = {Coll::allreduce, Coll::allgather, Coll::reduce_scatter,
                                     Coll::broadcast, Coll::reduce,    Coll::alltoall,
                                     Coll::gather,    Coll::scatter,   Coll::sendrecv};

std::string_view to_string(Coll coll);
// Our names, or nccl-tests' ("all_reduce", "all_gather", "reduce_scatter", "alltoall", ...).
std::optional<Coll> parse_coll(std::string_view name);

// The buffers of one call on a rank, in elements. `block` is the count argument of the call:
// what each rank contributes or receives per peer.
struct CollShape {
  std::size_t block = 0;
  std::size_t send = 0;
  std::size_t recv = 0;
  // In place, the send data lies in the receive buffer at this offset (reduce-scatter and
  // scatter: the receive block lies in the send buffer, at recv_in_send).
  std::size_t send_in_recv = 0;
  std::size_t recv_in_send = 0;
  bool in_recv = true;  // false: the in-place call's buffer is the send buffer
};

// The shape of a row of `count` elements on `ranks` ranks for `rank` (a rooted call's root
// holds the whole buffer). Collectives that split the row among ranks round `count` down to a
// multiple of `ranks`.
CollShape shape(Coll coll, std::size_t count, int ranks, int rank, int root);
// The elements a row of `count` really moves (after the rounding of shape()).
std::size_t row_elements(Coll coll, std::size_t count, int ranks);
// Whether a row is split in a block per rank (all-gather, reduce-scatter, all-to-all, gather,
// scatter): the call's count is then the row's divided by the ranks.
bool splits_row(Coll coll);
// nccl-tests' busbw / algbw: 2(n-1)/n for all-reduce, (n-1)/n for what moves every rank's
// block once (all-gather, reduce-scatter, all-to-all, gather, scatter), 1 for the rest.
double bus_factor(Coll coll, int ranks);
bool reduces(Coll coll);  // has an operator (the others print "none")
bool rooted(Coll coll);   // has a root (rank 0 in the sweep)

}  // namespace arbench
