// The records of the byte rings (segment.hpp) between two ranks: an entry, its payload in
// whole cache lines, and the copies in and out at a running position, wrapping at the end.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "src/base/reduce.hpp"
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
  device_descriptor = 7,  // a descriptor whose payload is the DeviceMemoryShare of the buffer
  copy_offer = 8,         // the receiver of a descriptor (its send id in `offset`) shares the copy
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
    kernels::copy_cached(static_cast<char*>(dst) + offset, src, length);
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

// Buffers larger than the caches are read page by page, a page ahead: the hardware's
// prefetchers stop at each 4 KiB page, and each new page of the stream would start with
// misses to memory (measured: 5-10 % of a 32-128 MiB all-reduce, for the copies into the
// ring and again for the reductions). In cache the prefetches only cost (2 MiB: 3 % slower).
inline constexpr std::size_t kPageBytes = 4096;

// Asks for the 4 KiB of a stream that follow the 4 KiB at `at` (prefetches never fault, even
// past a buffer's end).
inline void prefetch_next_page(const char* at) {
  for (std::size_t line = 0; line < kPageBytes; line += kLineBytes)
    __builtin_prefetch(at + kPageBytes + line, 0, 3);
}

inline void copy_from_memory(char* dst, const char* src, std::size_t bytes) {
  for (std::size_t at = 0; at < bytes; at += kPageBytes) {
    prefetch_next_page(src + at);
    kernels::copy_cached(dst + at, src + at, std::min(kPageBytes, bytes - at));
  }
}

// Writes an entry into a ring at `tail` and its payload after it, which `put(destination,
// offset, length)` writes (ring_write), its kind last; the new tail. The writer clears the kind
// where its next entry will go first (see Entry).
template <class Put>
std::uint64_t write_entry_with(Ring* ring, std::uint64_t tail, const Entry& entry, Put&& put) {
  const std::uint64_t next = tail + record_bytes(entry.payload);
  std::atomic_ref<EntryKind>(entry_at(ring, next)->kind)
      .store(EntryKind::none, std::memory_order_relaxed);
  Entry* slot = entry_at(ring, tail);  // records start on lines: an entry never wraps
  constexpr std::size_t kAfterKind = sizeof(EntryKind);
  std::memcpy(reinterpret_cast<char*>(slot) + kAfterKind,
              reinterpret_cast<const char*>(&entry) + kAfterKind, sizeof(Entry) - kAfterKind);
  if (entry.payload != 0) ring_write(ring, tail + sizeof(Entry), entry.payload, put);
  std::atomic_ref<EntryKind>(slot->kind).store(entry.kind, std::memory_order_release);
  return next;
}

// The same with the payload copied from `payload`; `from_memory`: a piece of a buffer larger
// than the caches; `streaming`: written with streaming stores (ring_stores.hpp).
inline std::uint64_t write_entry(Ring* ring, std::uint64_t tail, const Entry& entry,
                                 const void* payload, bool from_memory = false,
                                 bool streaming = false) {
  return write_entry_with(ring, tail, entry,
                          [&](char* dst, std::size_t offset, std::size_t length) {
                            const char* src = static_cast<const char*>(payload) + offset;
                            if (streaming)
                              kernels::copy(dst, src, length, kernels::Stores::streaming);
                            else if (from_memory)
                              copy_from_memory(dst, src, length);
                            else
                              kernels::copy_cached(dst, src, length);
                          });
}

}  // namespace arcoll::shm
