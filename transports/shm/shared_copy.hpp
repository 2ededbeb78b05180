// How a large message read across processes is cut for the copy both its ranks share
// (shared_copy.cpp): chunks that each side claims before copying.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace arcoll::shm {

// Messages read straight into their receive buffer from kSharedCopyBytes are copied by both
// ranks, in chunks of kSharedCopyChunkBytes, or of a sixteenth of larger messages (in whole
// pages), so that a rank that copies alone pays few calls; a gather's from kSharedHalvesBytes,
// in two halves, where every rank has a core (ShmTransport::shares_copy).
inline constexpr std::size_t kSharedCopyChunkBytes = 64 * 1024;
inline constexpr std::size_t kSharedCopyBytes = 2 * kSharedCopyChunkBytes;
inline constexpr std::size_t kSharedHalvesBytes = kSharedCopyChunkBytes;

inline std::uint64_t shared_copy_chunk_bytes(std::uint64_t bytes) {
  if (bytes < kSharedCopyBytes) return ((bytes + 1) / 2 + 4095) & ~std::uint64_t{4095};
  return std::max<std::uint64_t>(kSharedCopyChunkBytes, (bytes / 16 + 4095) & ~std::uint64_t{4095});
}
inline std::uint64_t shared_copy_chunks(std::uint64_t bytes) {
  return (bytes + shared_copy_chunk_bytes(bytes) - 1) / shared_copy_chunk_bytes(bytes);
}
// The most chunks a message has: sixteen of at least a sixteenth of it, and what rounding the
// sixteenth down left.
inline constexpr std::uint64_t kMaxSharedCopyChunks = 17;

}  // namespace arcoll::shm
