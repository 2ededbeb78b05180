// The records of the byte rings (segment.hpp) between two ranks: an entry, its payload in
// whole cache lines, and the copies in and out at a running position, wrapping at the end.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "transports/shm/segment.hpp"

namespace arcoll::shm {

enum class EntryKind : std::uint32_t {
  none = 0,  // not written yet: where the reader stops
  fragment = 1,
  descriptor = 2,
  ack = 3,
  goodbye = 4,
  abort = 5,
  shared_descriptor = 6,  // a descriptor whose payload is the SharedRegion holding the buffer
};

// The writer writes an entry's kind last, and clears the kind where its next entry will go
// before that: the reader polls the kind at its position and needs no other word from the
// writer (one cache line to fetch per small message, not two).
struct Entry {
  EntryKind kind;
  std::uint32_t tag;
  std::uint64_t message_bytes;  // whole message
  std::uint64_t offset;         // fragment: where its payload goes; ack: the send's id
  std::uint64_t address;        // descriptor: sender's buffer; its send id in `offset`
  std::uint32_t payload;        // fragment or abort text bytes following the entry
  std::uint32_t pad;
  std::uint64_t signature;  // fragment, descriptor: the collective call it belongs to
};
static_assert(sizeof(Entry) == 48 && sizeof(Entry) % 8 == 0);

// Has `put(destination, offset, length)` write the `n` bytes at a running position of a ring,
// in at most two pieces, wrapping at the end (pieces never split an element, as in ring_read).
template <class Put>
void ring_write(Ring* r, std::uint64_t position, std::size_t n, Put&& put) {
  const std::size_t at = position % kRingBytes;
  const std::size_t first = std::min(n, kRingBytes - at);
  put(r->data + at, std::size_t{0}, first);
  if (first < n) put(r->data, first, n - first);
}

// Hands the `n` bytes at a running position of a ring to `take(source, offset, length)` in
// at most two pieces, wrapping at the end. Payloads start 8-byte aligned and the ring's size
// is a multiple of 8, so a piece never splits an element.
template <class Take>
void ring_read(const Ring* r, std::uint64_t position, std::size_t n, Take&& take) {
  const std::size_t at = position % kRingBytes;
  const std::size_t first = std::min(n, kRingBytes - at);
  take(r->data + at, std::size_t{0}, first);
  if (first < n) take(r->data, first, n - first);
}

inline void ring_copy_out(const Ring* r, std::uint64_t position, void* dst, std::size_t n) {
  if (n == 0) return;  // an empty message's buffer may be null
  ring_read(r, position, n, [&](const char* src, std::size_t offset, std::size_t length) {
    std::memcpy(static_cast<char*>(dst) + offset, src, length);
  });
}

// An entry and its payload take whole cache lines of the ring: a small message is then one
// line for the writer to take over and one for the reader to fetch, and entries never wrap.
inline constexpr std::size_t kLineBytes = 64;
static_assert(sizeof(Entry) < kLineBytes && kRingBytes % kLineBytes == 0);
inline std::size_t record_bytes(std::size_t payload) {
  return (sizeof(Entry) + payload + kLineBytes - 1) & ~(kLineBytes - 1);
}

inline Entry* entry_at(const Ring* r, std::uint64_t position) {
  return reinterpret_cast<Entry*>(const_cast<char*>(r->data) + position % kRingBytes);
}

inline EntryKind kind_at(const Ring* r, std::uint64_t position) {
  return std::atomic_ref<EntryKind>(entry_at(r, position)->kind).load(std::memory_order_acquire);
}

}  // namespace arcoll::shm
