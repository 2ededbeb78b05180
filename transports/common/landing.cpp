#include "transports/common/landing.hpp"

#include "src/base/device_memory.hpp"
#include "src/base/reduce.hpp"

namespace arcoll::transport {

bool lands_as_copy(const Request& receive) {
  const auto& l = receive.landing;
  return !l || (l->with == nullptr && l->wire == l->type);
}

bool lands_straight_in(const Request& receive) {
  return receive.memory == nullptr && lands_as_copy(receive);
}

std::size_t landing_element(const Request& receive) {
  return lands_as_copy(receive) ? 1 : size_of(receive.landing->wire);
}

void land(const Request& receive, std::uint64_t offset, const void* src, std::size_t n) {
  if (n == 0) return;  // empty messages may have no buffer at all
  if (receive.memory != nullptr) {
    // Device memory (a call that runs on the device never narrows): its kind copies and
    // reduces, `src` being host memory or a peer's device buffer.
    char* dst = static_cast<char*>(receive.buffer) + offset;
    if (lands_as_copy(receive)) {
      receive.memory->copy(dst, src, n);
    } else {
      const Request::Landing& l = *receive.landing;
      receive.memory->reduce(dst, static_cast<const char*>(l.with) + offset, src,
                             n / size_of(l.type), l.type, l.op);
    }
    return;
  }
  const auto stores =
      receive.streaming_stores ? kernels::Stores::streaming : kernels::Stores::by_size;
  if (lands_as_copy(receive)) {
    kernels::copy(static_cast<char*>(receive.buffer) + offset, src, n, stores);
    return;
  }
  const Request::Landing& l = *receive.landing;
  const std::size_t count = n / size_of(l.wire);
  // Offsets in the buffer are in its own elements, which are wider than the wire's when widened.
  const std::size_t at = offset / size_of(l.wire) * size_of(l.type);
  char* dst = static_cast<char*>(receive.buffer) + at;
  if (l.wire == l.type) {
    kernels::reduce(dst, static_cast<const char*>(l.with) + at, src, count, l.type, l.op, stores);
  } else if (l.with != nullptr) {
    kernels::reduce_widened(reinterpret_cast<float*>(dst),
                            reinterpret_cast<const float*>(static_cast<const char*>(l.with) + at),
                            src, l.wire, count, l.op);
  } else {
    kernels::widen(reinterpret_cast<float*>(dst), src, l.wire, count);
  }
}

}  // namespace arcoll::transport
