// The communicator's point-to-point interface, as algorithms see it during one collective
// call: non-blocking sends and receives to ranks, waits bounded by the call's deadline, and
// scratch memory. Algorithms never see a transport.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "src/base/request.hpp"

namespace arcoll {

struct Layout;

// Messages of one collective travel on channels: concurrent streams of one algorithm (the
// rings of a multi-channel ring) use distinct channels so that their messages to the same
// peer never match each other's receives.
inline constexpr int kMaxChannels = 64;

class PointToPoint {
 public:
  virtual ~PointToPoint() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The host each rank runs on (0 .. hosts-1, numbered by lowest rank).
  virtual int node_of(int rank) const = 0;
  // The NUMA node each rank ran on when it joined (-1 unknown).
  virtual int numa_of(int rank) const = 0;
  // Pipeline chunk size for this call (the cost model's choice under auto, else
  // Options::chunk_bytes).
  virtual std::size_t chunk_bytes() const = 0;
  // Whether this call paces what it gives a partner by the partner's returns, each reduced
  // chunk sent back as it is reduced (halving-doubling's last round): always on buffers
  // larger than the caches (Options::streaming_bytes), where reading a result again costs a
  // pass over memory; below, each rank's timed choice (src/core/return_pacing.hpp): a call
  // that asks is timed for it.
  virtual bool pace_returns() = 0;
  // Hosts, ranks and link costs of the whole communicator: what the cost model predicts with
  // (hierarchical algorithms pick their inner parts with it).
  virtual const Layout& layout() const = 0;

  // Messages to one peer on one channel match the peer's receives in posting order.
  virtual RequestPtr isend(int peer, const void* buffer, std::size_t bytes, int channel) = 0;
  virtual RequestPtr irecv(int peer, void* buffer, std::size_t bytes, int channel) = 0;
  // Receives `count` elements and reduces them as they arrive: buffer[i] = with[i] op
  // message[i] (`with` may be `buffer`). Straight out of the transport where it can, else
  // through a staging buffer reduced when the request is waited for.
  virtual RequestPtr irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                                  DataType type, ReduceOp op, int channel) = 0;
  // irecv_reduce on `channel` (`with` not null), whose result is then sent back to `peer` as
  // one message on `forward_channel` (a halving's last round followed by a doubling's first):
  // where the transport can, each piece is written into the send as it is reduced, with no
  // second pass over the result; elsewhere it is sent when the request is waited for. The
  // request completes, in wait(), when both have. The sends of several such requests go out
  // in the order they are waited for, which must be the order they were posted; no other send
  // to `peer` on `forward_channel` may be posted while one is pending.
  virtual RequestPtr irecv_reduce_send(int peer, void* buffer, const void* with, std::size_t count,
                                       DataType type, ReduceOp op, int channel,
                                       int forward_channel) = 0;
  RequestPtr isend(int peer, const void* buffer, std::size_t bytes) {
    return isend(peer, buffer, bytes, 0);
  }
  RequestPtr irecv(int peer, void* buffer, std::size_t bytes) { return irecv(peer, buffer, bytes, 0); }
  RequestPtr irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                          DataType type, ReduceOp op) {
    return irecv_reduce(peer, buffer, with, count, type, op, 0);
  }
  // Block until the request completes; throws the transfer's error, or TimeoutError naming
  // the peer when the collective's deadline passes.
  virtual void wait(const RequestPtr& request) = 0;
  void wait_all(std::span<const RequestPtr> requests) {
    for (const auto& r : requests) wait(r);
  }

  // In mixed precision, rounds f32 data as the wire does (else nothing): a rank that keeps
  // its own copy of what it sends then computes with exactly what its partner receives.
  virtual void round_to_wire(void* data, std::size_t count, DataType type) = 0;
  // Whether round_to_wire() changes data of `type` in this call.
  virtual bool rounds_to_wire(DataType type) const = 0;

  // A buffer of at least `bytes` owned by the communicator, reused across calls. Each slot
  // (0, 1, ...) is a distinct buffer.
  virtual void* scratch(std::size_t bytes, int slot = 0) = 0;
  // Copies `bytes` between the call's buffers and scratch (nothing where `to` is `from`; other
  // overlapping ranges as memmove, in host memory only): how an algorithm moves bytes within
  // its rank, since they may be device memory that only their kind's copies touch.
  virtual void copy(void* to, const void* from, std::size_t bytes) = 0;

  // Boards: where every rank shares memory with every other (one host, over shm), each rank
  // can post up to board_capacity() bytes per call that all ranks read in place, with no
  // message (0: no boards). Collectives too small to be worth a message meet there.
  virtual std::size_t board_capacity() const = 0;
  // Posts `bytes` of `data` as this rank's part of the call, waits within the call's deadline
  // until every rank has posted its part, and returns the parts by rank. They stay readable
  // until this rank's next exchange_on_boards().
  virtual std::span<const std::byte* const> exchange_on_boards(const void* data,
                                                               std::size_t bytes) = 0;
};

}  // namespace arcoll
