// The TCP transport's wire format. Every byte read from a socket is checked against it
// before use: a stranger or a corrupted stream produces a clear error, never a wild write.
//
// A connection starts with a Hello from the connecting rank. Then each direction carries
// frames: a 48-byte header and `length` payload bytes. A message (one send) is cut into
// frames striped over the peer's sockets; its first frame always travels on socket 0, so
// socket 0 reveals messages in send order and receives match them in that order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace arcoll::tcp {

inline constexpr std::uint32_t kHelloMagic = 0x48545241;  // "ARTH"
inline constexpr std::uint32_t kFrameMagic = 0x46545241;  // "ARTF"
inline constexpr std::uint16_t kVersion = 2;
inline constexpr std::uint32_t kMaxFramePayload = 16u << 20;
inline constexpr std::uint64_t kMaxMessageBytes = 1ull << 48;
inline constexpr std::uint32_t kMaxAbortText = 4096;

enum class FrameKind : std::uint8_t { data = 1, abort = 2, goodbye = 3 };

struct Hello {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t socket_index;
  std::int32_t rank;
  std::int32_t world_size;
  std::uint64_t job_id;
};

struct FrameHeader {
  std::uint32_t magic;
  std::uint8_t version;
  std::uint8_t kind;
  std::uint16_t reserved;
  std::uint32_t tag;
  std::uint32_t length;         // payload bytes of this frame
  std::uint64_t sequence;       // message number on this peer pair, from 0
  std::uint64_t message_bytes;  // size of the whole message
  std::uint64_t offset;         // where this frame's payload goes in the message
  std::uint64_t signature;      // the collective call it belongs to (src/core/call_signature.hpp)
};
// Wire structs are laid out without padding (so their bytes are the wire format) and keep
// their natural alignment (so their fields can be read in place).
static_assert(sizeof(FrameHeader) == 48 && offsetof(FrameHeader, sequence) == 16);
static_assert(sizeof(Hello) == 24 && offsetof(Hello, job_id) == 16);

// What a receiver expects of a Hello on its listening socket.
struct HelloExpectation {
  std::uint64_t job_id;
  int world_size;
  int sockets_per_peer;
};

FrameHeader make_data_header(std::uint32_t tag, std::uint64_t signature, std::uint64_t sequence,
                             std::uint64_t message_bytes, std::uint64_t offset,
                             std::uint32_t length);
// An abort frame's `offset` carries the collective from which its sender failed.
FrameHeader make_control_header(FrameKind kind, std::uint32_t length,
                                std::uint64_t failed_call = 0);
Hello make_hello(int rank, int world_size, int socket_index, std::uint64_t job_id);

// Empty when acceptable, else the reason to reject.
std::string validate(const FrameHeader& header);
std::string validate(const Hello& hello, const HelloExpectation& expected);

}  // namespace arcoll::tcp
