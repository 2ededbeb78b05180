#include "transports/common/opened_device_memory.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>

namespace arcoll::transport {
namespace {

struct Opening {
  const DeviceMemoryInfo* kind;
  void* base;               // in this process
  DeviceMemoryShare share;  // as its process described it
  int holders = 0;          // transports of this process that hold it
};

// The process's openings, by sharing process and allocation.
struct Openings {
  std::mutex mutex;
  std::map<std::pair<int, std::uint64_t>, Opening> by_allocation;

  using Entry = decltype(by_allocation)::iterator;
  void close(Entry it) noexcept {
    try {
      it->second.kind->close(it->second.base);
    } catch (...) {
      // A peer's memory that cannot be closed is let go with this process.
    }
    by_allocation.erase(it);
  }
  // Closes the openings of process `pid` that share's allocation overlaps in that process:
  // allocations that process freed, since its live ones never overlap.
  void close_overlapping(int pid, const DeviceMemoryShare& share) noexcept {
    for (auto it = by_allocation.lower_bound({pid, 0});
         it != by_allocation.end() && it->first.first == pid;) {
      const DeviceMemoryShare& old = it->second.share;
      const bool overlaps =
          old.base < share.base + share.bytes && share.base < old.base + old.bytes;
      const auto next = std::next(it);
      if (overlaps) close(it);
      it = next;
    }
  }
};
Openings& openings() {
  static Openings o;
  return o;
}

// Lets go of the openings in `held`, closing those no other transport holds; with the mutex held.
void release(Openings& all, std::set<std::pair<int, std::uint64_t>>& held) noexcept {
  for (const auto& key : held) {
    const auto it = all.by_allocation.find(key);  // absent: closed as stale meanwhile
    if (it != all.by_allocation.end() && --it->second.holders == 0) all.close(it);
  }
  held.clear();
}

}  // namespace

const DeviceMemoryInfo* OpenedDeviceMemory::kind_of(const DeviceMemoryShare& share) {
  const auto& name = share.kind;
  const std::string_view kind(name.data(),
                              std::find(name.begin(), name.end(), '\0') - name.begin());
  const DeviceMemoryInfo* info = DeviceMemoryRegistry::instance().find(kind);
  return info != nullptr && info->open ? info : nullptr;
}

const char* OpenedDeviceMemory::open(const DeviceMemoryInfo& kind, int pid, int pidfd,
                                     const DeviceMemoryShare& share, const void* near) {
  Openings& all = openings();
  const auto key = std::pair(pid, share.allocation);
  std::lock_guard lock(all.mutex);
  auto it = all.by_allocation.find(key);
  // The same number from another handle: a new process under a dead one's pid.
  if (it != all.by_allocation.end() && it->second.share.handle != share.handle) {
    all.close(it);
    it = all.by_allocation.end();
  }
  if (it == all.by_allocation.end()) {
    if (held_.size() >= kLimit) release(all, held_);
    all.close_overlapping(pid, share);
    void* base = kind.open(share, pid, pidfd, near);
    it = all.by_allocation.emplace(key, Opening{&kind, base, share}).first;
  }
  if (held_.insert(key).second) ++it->second.holders;
  return static_cast<const char*>(it->second.base) + share.offset;
}

void OpenedDeviceMemory::release_all() noexcept {
  Openings& all = openings();
  std::lock_guard lock(all.mutex);
  release(all, held_);
}

}  // namespace arcoll::transport
