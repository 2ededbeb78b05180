// Peers' shared memory (arcoll::mem_alloc, src/base/shared_memory.hpp) as this rank maps it: a send
// from such memory travels as a descriptor of its region, and the receiver maps the region
// once, read-only, to read or reduce messages straight out of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "transports/shm/segment.hpp"

namespace arcoll::shm {

// A region as descriptors carry it (the payload of a shared descriptor).
struct SharedRegion {
  std::uint64_t id;    // unique within the sender, never reused: a mapping never goes stale
  std::uint64_t base;  // in the sender's address space
  std::uint64_t bytes;
  std::int32_t fd;  // the sender's descriptor of it
  std::uint32_t pad;
};
static_assert(sizeof(SharedRegion) == 32);

class PeerRegions {
 public:
  // Mappings kept; past this many all are let go (a freed region's pages live on while a peer
  // maps them).
  static constexpr std::size_t kLimit = 256;

  // The region's base as mapped here, mapping it on first use through the peer's pidfd
  // (pidfd_getfd); null when it cannot be (the peer is gone, or may not be read).
  const char* map(int peer, int peer_pidfd, const SharedRegion& region);

 private:
  std::map<std::pair<int, std::uint64_t>, Mapping> mappings_;  // by peer and region id
};

}  // namespace arcoll::shm
