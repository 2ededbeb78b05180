#include "transports/common/opened_device_memory.hpp"

#include <algorithm>
#include <string_view>

namespace arcoll::transport {

const DeviceMemoryInfo* OpenedDeviceMemory::kind_of(const DeviceMemoryShare& share) {
  const auto& name = share.kind;
  const std::string_view kind(name.data(),
                              std::find(name.begin(), name.end(), '\0') - name.begin());
  const DeviceMemoryInfo* info = DeviceMemoryRegistry::instance().find(kind);
  return info != nullptr && info->open ? info : nullptr;
}

const char* OpenedDeviceMemory::open(const DeviceMemoryInfo& kind, int peer, int pid, int pidfd,
                                     const DeviceMemoryShare& share, const void* near) {
  const auto key = std::pair(peer, share.allocation);
  auto it = opened_.find(key);
  if (it == opened_.end()) {
    if (opened_.size() >= kLimit) close_all();
    it = opened_.emplace(key, Opening{&kind, kind.open(share, pid, pidfd, near)}).first;
  }
  return static_cast<const char*>(it->second.base) + share.offset;
}

void OpenedDeviceMemory::close_all() noexcept {
  for (const auto& [key, opening] : opened_) {
    try {
      opening.kind->close(opening.base);
    } catch (...) {
      // A peer's memory that cannot be closed is let go with this process.
    }
  }
  opened_.clear();
}

}  // namespace arcoll::transport
