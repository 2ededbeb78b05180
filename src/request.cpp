#include "src/request.hpp"

#include "src/call_signature.hpp"

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

std::string Request::mismatch(std::uint64_t arrived_bytes, std::uint64_t arrived_signature) const {
  if (arrived_signature != signature)
    return "call mismatch: rank " + std::to_string(peer) + " is in " +
           describe_signature(arrived_signature) + " where this rank is in " +
           describe_signature(signature) + " (tag " + hex_tag(tag) +
           "): do all ranks make the same calls, with the same count, type, op and root?";
  if (arrived_bytes != bytes)
    return "rank " + std::to_string(peer) + " sent " + std::to_string(arrived_bytes) +
           " B where this rank expected " + std::to_string(bytes) + " B (tag " + hex_tag(tag) +
           "): do all ranks pass the same count and type?";
  return {};
}

}  // namespace arcoll
