#include "transports/tcp/frame.hpp"

namespace arcoll::tcp {

FrameHeader make_data_header(std::uint32_t tag, std::uint64_t signature, std::uint64_t sequence,
                             std::uint64_t message_bytes, std::uint64_t offset,
                             std::uint32_t length) {
  return FrameHeader{kFrameMagic, kVersion,      static_cast<std::uint8_t>(FrameKind::data),
                     0,           tag,           length,
                     sequence,    message_bytes, offset,
                     signature};
}

FrameHeader make_control_header(FrameKind kind, std::uint32_t length, std::uint64_t failed_call) {
  return FrameHeader{kFrameMagic, kVersion, static_cast<std::uint8_t>(kind), 0, 0, length, 0,
                     length,      failed_call, 0};
}

Hello make_hello(int rank, int world_size, int socket_index, std::uint64_t job_id) {
  return Hello{kHelloMagic, kVersion,   static_cast<std::uint16_t>(socket_index),
               rank,        world_size, job_id};
}

std::string validate(const FrameHeader& h) {
  if (h.magic != kFrameMagic) return "bad frame magic";
  if (h.version != kVersion)
    return "frame version " + std::to_string(h.version) + ", expected " + std::to_string(kVersion);
  if (h.reserved != 0) return "reserved header bits set";
  switch (static_cast<FrameKind>(h.kind)) {
    case FrameKind::data:
      if (h.length > kMaxFramePayload)
        return "frame payload of " + std::to_string(h.length) + " B above the limit";
      if (h.message_bytes > kMaxMessageBytes)
        return "message size " + std::to_string(h.message_bytes) + " B above the limit";
      if (h.offset > h.message_bytes || h.length > h.message_bytes - h.offset)
        return "frame [" + std::to_string(h.offset) + ", +" + std::to_string(h.length) +
               ") outside its message of " + std::to_string(h.message_bytes) + " B";
      if (h.length == 0 && h.message_bytes != 0) return "empty frame in a non-empty message";
      return {};
    case FrameKind::abort:
      if (h.signature != 0) return "call signature on a control frame";
      if (h.length > kMaxAbortText) return "abort reason too long";
      return {};
    case FrameKind::goodbye:
      if (h.signature != 0) return "call signature on a control frame";
      if (h.offset != 0) return "failed call on a goodbye frame";
      if (h.length != 0) return "goodbye frame with a payload";
      return {};
  }
  return "unknown frame kind " + std::to_string(h.kind);
}

std::string validate(const Hello& hello, const HelloExpectation& expected) {
  if (hello.magic != kHelloMagic) return "bad magic (not an arcoll rank)";
  if (hello.version != kVersion)
    return "protocol version " + std::to_string(hello.version) + ", expected " +
           std::to_string(kVersion);
  if (hello.job_id != expected.job_id) return "belongs to another job";
  if (hello.world_size != expected.world_size)
    return "world size " + std::to_string(hello.world_size) + ", this job has " +
           std::to_string(expected.world_size);
  if (hello.rank < 0 || hello.rank >= expected.world_size)
    return "rank " + std::to_string(hello.rank) + " out of range";
  if (hello.socket_index >= expected.sockets_per_peer)
    return "socket index " + std::to_string(hello.socket_index) + " out of range";
  return {};
}

}  // namespace arcoll::tcp
