#include "src/request.hpp"

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

std::string Request::size_mismatch(std::uint64_t arrived) const {
  return "rank " + std::to_string(peer) + " sent " + std::to_string(arrived) +
         " B where this rank expected " + std::to_string(bytes) + " B (tag " + hex_tag(tag) +
         "): do all ranks pass the same count and type?";
}

}  // namespace arcoll
