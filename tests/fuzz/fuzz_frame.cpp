// libFuzzer target: bytes off a TCP connection, read as the transport reads them (a Hello,
// then frame headers, each followed by its payload). Whatever validate() accepts must be safe
// to act on: a data frame lies inside its message, a control frame is within its limit.
#include <cstdint>
#include <cstring>

#include "transports/tcp/frame.hpp"

using namespace arcoll::tcp;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < sizeof(Hello)) return 0;
  Hello hello;
  std::memcpy(&hello, data, sizeof hello);
  const HelloExpectation expected{0x1234, 8, 2};
  if (validate(hello, expected).empty() &&
      (hello.rank < 0 || hello.rank >= 8 || hello.socket_index >= 2 || hello.job_id != 0x1234))
    __builtin_trap();
  std::size_t at = sizeof hello;
  while (size - at >= sizeof(FrameHeader)) {
    FrameHeader h;
    std::memcpy(&h, data + at, sizeof h);
    at += sizeof h;
    if (!validate(h).empty()) return 0;  // the connection is dropped
    const bool is_data = h.kind == static_cast<std::uint8_t>(FrameKind::data);
    if (is_data && (h.offset > h.message_bytes || h.message_bytes - h.offset < h.length ||
                    h.length > kMaxFramePayload))
      __builtin_trap();
    if (!is_data && h.length > kMaxAbortText) __builtin_trap();
    if (size - at < h.length) return 0;  // the rest has not arrived
    at += h.length;
  }
  return 0;
}
