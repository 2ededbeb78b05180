#include "transports/common/opened_device_memory.hpp"

#include <algorithm>
#include <iterator>
#include <mutex>
#include <string_view>

namespace arcoll::transport {
namespace {

struct Opening {
  const DeviceMemoryInfo* kind;
  void* base;               // in this process
  DeviceMemoryShare share;  // as its process described it
  std::uint64_t generation;  // tells it from a later opening under the same key
  int holders = 0;           // transports of this process that hold it
};

// The process's openings, by sharing process and allocation.
struct Openings {
  std::mutex mutex;
  std::map<OpenedDeviceMemory::Key, Opening> by_allocation;
  std::uint64_t generations = 0;

  using Entry = decltype(by_allocation)::iterator;
  void close(Entry it) noexcept {
    try {
      it->second.kind->close(it->second.base);
    } catch (...) {
      // A peer's memory that cannot be closed is let go with this process.
    }
    by_allocation.erase(it);
  }
  // Closes the openings of `process` that share's allocation overlaps there: allocations that
  // process freed, since its live ones never overlap.
  void close_overlapping(const SharingProcess& process, const DeviceMemoryShare& share) noexcept {
    for (auto it = by_allocation.lower_bound({process, 0});
         it != by_allocation.end() && it->first.first == process;) {
      const DeviceMemoryShare& old = it->second.share;
      const bool overlaps =
          old.base < share.base + share.bytes && share.base < old.base + old.bytes;
      const auto next = std::next(it);
      if (overlaps) close(it);
      it = next;
    }
  }
};
// Never destroyed: a communicator that outlives main() (a static one) still lets go of its
// openings.
Openings& openings() {
  static Openings& o = *new Openings;
  return o;
}

// Lets go of the openings in `held`, closing those no other transport holds; with the mutex held.
void release(Openings& all, std::map<OpenedDeviceMemory::Key, std::uint64_t>& held) noexcept {
  for (const auto& [key, generation] : held) {
    const auto it = all.by_allocation.find(key);  // absent, or another: closed as stale meanwhile
    if (it != all.by_allocation.end() && it->second.generation == generation &&
        --it->second.holders == 0)
      all.close(it);
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

const char* OpenedDeviceMemory::open(const DeviceMemoryInfo& kind, const SharingProcess& process,
                                     int pidfd, const DeviceMemoryShare& share, const void* near) {
  Openings& all = openings();
  const Key key{process, share.allocation};
  std::lock_guard lock(all.mutex);
  auto it = all.by_allocation.find(key);
  if (it == all.by_allocation.end()) {
    if (held_.size() >= kLimit) release(all, held_);
    all.close_overlapping(process, share);
    void* base = kind.open(share, process.pid, pidfd, near);
    it = all.by_allocation.emplace(key, Opening{&kind, base, share, ++all.generations}).first;
  }
  Opening& opening = it->second;
  const auto [held, added] = held_.try_emplace(key, opening.generation);
  if (added || held->second != opening.generation) {
    held->second = opening.generation;
    ++opening.holders;
  }
  return static_cast<const char*>(opening.base) + share.offset;
}

void OpenedDeviceMemory::release_all() noexcept {
  if (held_.empty()) return;
  Openings& all = openings();
  std::lock_guard lock(all.mutex);
  release(all, held_);
}

}  // namespace arcoll::transport
