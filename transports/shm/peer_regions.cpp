#include "transports/shm/peer_regions.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/base/socket.hpp"

namespace arcoll::shm {

const char* PeerRegions::map(int peer, int peer_pidfd, const SharedRegion& region) {
  const auto key = std::pair(peer, region.id);
  if (auto it = mappings_.find(key); it != mappings_.end())
    return static_cast<const char*>(it->second.get());
  if (mappings_.size() >= kLimit) mappings_.clear();
  if (peer_pidfd < 0) return nullptr;
  const net::Fd fd(static_cast<int>(::syscall(SYS_pidfd_getfd, peer_pidfd, region.fd, 0)));
  if (!fd) return nullptr;
  void* base = ::mmap(nullptr, region.bytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return nullptr;
  return static_cast<const char*>(
      mappings_.emplace(key, Mapping(base, region.bytes)).first->second.get());
}

}  // namespace arcoll::shm
