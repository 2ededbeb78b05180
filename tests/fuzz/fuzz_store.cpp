// libFuzzer target: the rendezvous store's request parser and table, fed arbitrary bytes from
// two clients in turn. It must never crash, never grow without bound, and every reply must be
// a well-formed reply header followed by exactly its value.
#include <cstdint>
#include <cstring>
#include <string>

#include "src/base/store.hpp"

using namespace arcoll::store_protocol;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Table table;
  std::string in[2];
  bool dropped[2] = {false, false};
  const Table::Reply check = [](int client, const std::string& bytes) {
    ReplyHeader header;
    if (client < 0 || client > 1 || bytes.size() < sizeof header) __builtin_trap();
    std::memcpy(&header, bytes.data(), sizeof header);
    if (header.magic != kMagic || header.value_len != bytes.size() - sizeof header ||
        header.value_len > kMaxValue)
      __builtin_trap();
  };
  // Each piece: a byte saying which client and how many bytes follow (up to 127).
  std::size_t at = 0;
  while (at < size) {
    const int client = data[at] >> 7;
    const std::size_t length = std::min<std::size_t>(data[at] & 0x7f, size - at - 1);
    ++at;
    if (dropped[client]) {
      at += length;
      continue;
    }
    in[client].append(reinterpret_cast<const char*>(data + at), length);
    at += length;
    if (!table.handle(client, in[client], check).empty()) {
      dropped[client] = true;
      table.drop(client);
    }
    if (in[client].size() > sizeof(RequestHeader) + kMaxKey + kMaxValue) __builtin_trap();
  }
  table.expire(arcoll::net::Clock::now() + std::chrono::hours(48), check);
  if (table.next_deadline()) __builtin_trap();  // every wait answered
  return 0;
}
