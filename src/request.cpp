#include "src/request.hpp"

#include <cstdio>

namespace arcoll {

std::string Request::describe() const {
  char tag_text[16];
  std::snprintf(tag_text, sizeof tag_text, "0x%08x", tag);
  return std::string(kind == Kind::send ? "send of " : "receive of ") + std::to_string(bytes) +
         " B " + (kind == Kind::send ? "to" : "from") + " rank " + std::to_string(peer) + " (tag " +
         tag_text + ")";
}

}  // namespace arcoll
