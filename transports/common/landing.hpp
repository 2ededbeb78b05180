// Where received bytes meet their destination. One rule for every transport: a message is
// combined into its receive's buffer (copied, reduced, widened from the wire format; see
// Request::Landing) by `land`, piece by piece as it arrives, straight from wherever the
// transport holds the bytes (a shared ring, a peer's memory, a socket read into a small
// buffer), so that the reduction reads them while they are in this core's cache and no
// staging copy of the message is ever made. A receive of a call on a large buffer lands with
// streaming stores (Request::streaming_stores). The engine calls it too, for the one kind of
// message it must see whole before combining: one checked against its checksum.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/request.hpp"

namespace arcoll::transport {

// Puts `n` bytes of `receive`'s message, found at `offset` of the message, into its buffer
// (through its kind's copy where it is device memory: Request::memory). Pieces hold whole
// elements of the message.
void land(const Request& receive, std::uint64_t offset, const void* src, std::size_t n);

// Whether the message lands as a plain copy, so that a transport may read it straight into
// the buffer at the same offsets.
bool lands_as_copy(const Request& receive);

// Whether a transport may write the message's bytes straight into the receive's buffer (a plain
// copy into host memory): else they land through land(), from a buffer of the transport's.
bool lands_straight_in(const Request& receive);

// The size of one message element of `receive` (1 for plain copies): pieces given to land hold
// whole ones.
std::size_t landing_element(const Request& receive);

}  // namespace arcoll::transport
