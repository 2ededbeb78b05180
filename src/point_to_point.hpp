// The communicator's point-to-point interface, as algorithms see it during one collective
// call: non-blocking sends and receives to ranks, waits bounded by the call's deadline, and
// scratch memory. Algorithms never see a transport.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "src/request.hpp"

namespace arcoll {

class PointToPoint {
 public:
  virtual ~PointToPoint() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Pipeline chunk size configured for this communicator (Options::chunk_bytes).
  virtual std::size_t chunk_bytes() const = 0;

  // Messages to one peer within a collective match the peer's receives in posting order.
  virtual RequestPtr isend(int peer, const void* buffer, std::size_t bytes) = 0;
  virtual RequestPtr irecv(int peer, void* buffer, std::size_t bytes) = 0;
  // Receives `count` elements and reduces them as they arrive: buffer[i] = with[i] op
  // message[i] (`with` may be `buffer`). Straight out of the transport where it can, else
  // through a staging buffer reduced when the request is waited for.
  virtual RequestPtr irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                                  DataType type, ReduceOp op) = 0;
  // Block until the request completes; throws the transfer's error, or TimeoutError naming
  // the peer when the collective's deadline passes.
  virtual void wait(const RequestPtr& request) = 0;
  void wait_all(std::span<const RequestPtr> requests) {
    for (const auto& r : requests) wait(r);
  }

  // A buffer of at least `bytes` owned by the communicator, reused across calls. Each slot
  // (0, 1, ...) is a distinct buffer.
  virtual void* scratch(std::size_t bytes, int slot = 0) = 0;
};

}  // namespace arcoll
