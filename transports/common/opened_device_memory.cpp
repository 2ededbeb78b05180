#include "transports/common/opened_device_memory.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <string_view>

namespace arcoll::transport {
namespace {

struct Opening {
  const DeviceMemoryInfo* kind;
  void* base;                 // in this process
  std::uint64_t shared_base;  // the allocation's addresses in its process
  std::uint64_t bytes;
  int holders = 0;  // transports of this process that hold it
};

// The process's openings, by sharing process and allocation.
struct Openings {
  std::mutex mutex;
  std::map<OpenedDeviceMemory::Key, Opening> by_allocation;

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
      const Opening& old = it->second;
      const bool overlaps =
          old.shared_base < share.base + share.bytes && share.base < old.shared_base + old.bytes;
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
// A key names one allocation for the life of its process, so an opening found under it is the
// one held, unless it was closed as stale meanwhile (then it is absent, and never asked again).
void release(Openings& all, std::set<OpenedDeviceMemory::Key>& held) noexcept {
  for (const auto& key : held) {
    const auto it = all.by_allocation.find(key);
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
    it = all.by_allocation.emplace(key, Opening{&kind, base, share.base, share.bytes}).first;
  }
  if (held_.insert(key).second) ++it->second.holders;
  return static_cast<const char*>(it->second.base) + share.offset;
}

void OpenedDeviceMemory::release_all() noexcept {
  if (held_.empty()) return;
  Openings& all = openings();
  std::lock_guard lock(all.mutex);
  release(all, held_);
}

}  // namespace arcoll::transport
