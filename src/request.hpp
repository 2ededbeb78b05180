// One point-to-point transfer in flight, shared by the caller that waits on it and the
// transport that moves its bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "arcoll/types.hpp"

namespace arcoll {

struct Request {
  enum class Kind : std::uint8_t { send, recv };

  Kind kind = Kind::send;
  int peer = 0;
  std::uint32_t tag = 0;
  // The collective call this message belongs to (call_signature.hpp), 0 for point-to-point;
  // carried in the message header, compared by the receive that takes it.
  std::uint64_t signature = 0;
  void* buffer = nullptr;  // const for sends
  std::size_t bytes = 0;
  // A receive that reduces: the message lands combined element-wise with `with` (which may be
  // `buffer` itself), buffer[i] = with[i] op message[i]. Posted only to transports that
  // reduce on receive.
  struct Reduction {
    const void* with = nullptr;
    DataType type = DataType::f32;
    ReduceOp op = ReduceOp::sum;
  };
  std::optional<Reduction> reduction;
  // Set by the transport.
  std::size_t transferred = 0;
  bool done = false;
  std::exception_ptr error;  // set together with done when the transfer failed

  std::string describe() const;  // "recv of 1048576 B from rank 3 (tag 0x80000012)"
  // Why this receive cannot take a message of `bytes` sent by a call with `signature`; empty
  // when it can (every transport says it alike).
  std::string mismatch(std::uint64_t bytes, std::uint64_t signature) const;
};

// "0x80000012": how tags appear in messages.
std::string hex_tag(std::uint32_t tag);

using RequestPtr = std::shared_ptr<Request>;

}  // namespace arcoll
