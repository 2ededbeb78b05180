#include "src/base/request.hpp"

#include <cstdio>

namespace arcoll {

std::string hex_tag(std::uint32_t tag) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", tag);
  return text;
}

std::string Request::describe() const {
  return std::string(kind == Kind::send ? "send of " : "receive of ") + std::to_string(bytes) +
         " B " + (kind == Kind::send ? "to" : "from") + " rank " + std::to_string(peer) + " (tag " +
         hex_tag(tag) + ")";
}

CallMismatch::CallMismatch(const Request& receive, std::uint64_t bytes, std::uint64_t signature)
    : InvalidArgument("receive",
                      "rank " + std::to_string(receive.peer) + " sent " + std::to_string(bytes) +
                          " B of call " + std::to_string(signature) + " to the " +
                          receive.describe() + " of call " + std::to_string(receive.signature),
                      Error::kNoRank, receive.peer),
      peer(receive.peer),
      tag(receive.tag),
      expected_bytes(receive.bytes),
      arrived_bytes(bytes),
      expected_signature(receive.signature),
      arrived_signature(signature) {}

std::exception_ptr check_match(const Request& receive, std::uint64_t bytes,
                               std::uint64_t signature) {
  if (bytes == receive.bytes && signature == receive.signature) return nullptr;
  return std::make_exception_ptr(CallMismatch(receive, bytes, signature));
}

}  // namespace arcoll
