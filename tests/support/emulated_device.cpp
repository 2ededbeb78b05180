#include "tests/support/emulated_device.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/device_memory.hpp"
#include "src/base/reduce.hpp"

namespace arcoll::testing {
namespace {

struct Region {
  char* readable;
  std::size_t bytes;
  int fd;                    // the memfd, kept for peers to open it (-1: a peer's, opened here)
  std::uint64_t allocation;  // never reused
  // Of a peer's allocation opened here: its process and its addresses there.
  int opened_from = 0;
  std::uint64_t peer_base = 0;
};

std::atomic<std::uint64_t> next_allocation{1};
std::atomic<std::uint64_t> openings{0};
std::atomic<std::uint64_t> copies_to_host{0};

// Both mappings of each allocation, by the address of the one without access.
struct Regions {
  std::mutex mutex;
  std::map<const char*, Region, std::greater<>> by_device;
};
Regions& regions() {
  static Regions r;
  return r;
}

// The allocation holding `device` (its device address and region), null when none does; with
// regions().mutex held.
const std::pair<const char* const, Region>* holding(const void* device) {
  const auto* d = static_cast<const char*>(device);
  const auto& by_device = regions().by_device;
  const auto it = by_device.lower_bound(d);  // the last allocation starting at or before d
  if (it == by_device.end() || d >= it->first + it->second.bytes) return nullptr;
  return &*it;
}

// The readable address of `device`, nullptr when it lies in no allocation.
char* readable(const void* device) {
  std::lock_guard lock(regions().mutex);
  const auto* at = holding(device);
  return at == nullptr ? nullptr
                       : at->second.readable + (static_cast<const char*>(device) - at->first);
}

char* readable_or_throw(const void* device) {
  char* at = readable(device);
  if (at == nullptr) throw std::logic_error("emulated device: not its memory");
  return at;
}

// Both mappings of the memfd `fd`, `mapped` bytes, registered as one allocation (a peer's,
// opened from process `opened_from`, where it lies at `peer_base`).
void* map_device(int fd, std::size_t mapped, bool keep_fd, int opened_from = 0,
                 std::uint64_t peer_base = 0) {
  void* device = ::mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
  void* alias = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (!keep_fd) ::close(fd);
  if (device == MAP_FAILED || alias == MAP_FAILED)
    throw std::runtime_error("emulated device: mmap failed");
  Regions& r = regions();
  std::lock_guard lock(r.mutex);
  r.by_device[static_cast<char*>(device)] = {
      static_cast<char*>(alias), mapped,      keep_fd ? fd : -1,
      next_allocation++,         opened_from, peer_base};
  return device;
}

// The readable address of `p` where it is emulated device memory, else `p` (host memory).
template <class T>
T* readable_or_host(T* p) {
  char* at = readable(p);
  return at != nullptr ? at : p;
}

// Whether `device` lies in an allocation other processes can open (not one of
// emulated_device_alloc_unshareable's, as memory of a CUDA pool cannot be).
bool shareable(const void* device) {
  std::lock_guard lock(regions().mutex);
  const auto* at = holding(device);
  return at != nullptr && at->second.fd >= 0;
}

// The sharing of an allocation with another process (as CUDA IPC does): the memfd's number in
// this process, which the other takes through this process's pidfd.
void share(const void* device, DeviceMemoryShare& out) {
  std::lock_guard lock(regions().mutex);
  const auto* at = holding(device);
  if (at == nullptr || at->second.fd < 0)
    throw std::logic_error("emulated device: sharing what it cannot share");
  std::copy_n("emulated", 9, out.kind.begin());
  out.allocation = at->second.allocation;
  out.base = reinterpret_cast<std::uintptr_t>(at->first);
  out.offset = static_cast<std::uint64_t>(static_cast<const char*>(device) - at->first);
  out.bytes = at->second.bytes;
  std::memcpy(out.handle.data(), &at->second.fd, sizeof at->second.fd);
}

// As CUDA IPC does (seen on an H200), a process maps another's allocation once, and refuses one
// at addresses of the other's that a mapping here still covers (one the other freed since).
void* open(const DeviceMemoryShare& share, int pid, int pidfd, const void* /*near*/) {
  {
    std::lock_guard lock(regions().mutex);
    for (const auto& [device, region] : regions().by_device)
      if (region.opened_from == pid && region.peer_base < share.base + share.bytes &&
          share.base < region.peer_base + region.bytes)
        throw SystemError("emulated device", "resource already mapped");
  }
  int peer_fd = -1;
  std::memcpy(&peer_fd, share.handle.data(), sizeof peer_fd);
  const int fd = pidfd < 0 ? -1 : static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, peer_fd, 0));
  if (fd < 0)
    throw SystemError("emulated device", std::string("the peer's allocation cannot be taken: ") +
                                             std::strerror(errno));
  ++openings;
  return map_device(fd, share.bytes, false, pid, share.base);
}

const DeviceMemoryRegistrar kEmulatedDevice{{
    "emulated",
    [](const void* address) { return readable(address) != nullptr; },
    [](void* host, const void* device, std::size_t bytes) {
      ++copies_to_host;
      std::memcpy(host, readable_or_throw(device), bytes);
    },
    [](void* device, const void* host, std::size_t bytes) {
      std::memcpy(readable_or_throw(device), host, bytes);
    },
    [](std::size_t bytes) { return std::malloc(bytes); },
    [](void* host) { std::free(host); },
    shareable,
    share,
    open,
    [](void* opened) { emulated_device_free(opened); },
    [](void* to, const void* from, std::size_t bytes) {
      if (bytes != 0) std::memcpy(readable_or_host(to), readable_or_host(from), bytes);
    },
    [](std::size_t bytes, const void*) { return emulated_device_alloc(bytes); },
    emulated_device_free,
    [](void* out, const void* with, const void* from, std::size_t count, DataType type,
       ReduceOp op) {
      if (count != 0)
        kernels::reduce(readable_or_throw(out), readable_or_throw(with), readable_or_host(from),
                        count, type, op);
    },
}};

}  // namespace

void* emulated_device_alloc(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  const int fd = ::memfd_create("arcoll-emulated-device", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(mapped)) != 0)
    throw std::runtime_error("emulated device: memfd failed");
  return map_device(fd, mapped, true);
}

void* emulated_device_alloc_unshareable(std::size_t bytes) {
  void* device = emulated_device_alloc(bytes);
  Regions& r = regions();
  std::lock_guard lock(r.mutex);
  Region& region = r.by_device.at(static_cast<const char*>(device));
  ::close(std::exchange(region.fd, -1));
  return device;
}

void emulated_device_free(void* device) {
  Regions& r = regions();
  std::lock_guard lock(r.mutex);
  const auto it = r.by_device.find(static_cast<const char*>(device));
  if (it == r.by_device.end()) return;
  ::munmap(device, it->second.bytes);
  ::munmap(it->second.readable, it->second.bytes);
  if (it->second.fd >= 0) ::close(it->second.fd);
  r.by_device.erase(it);
}

std::uint64_t emulated_device_openings() {
  return openings.load();
}

std::uint64_t emulated_device_copies_to_host() {
  return copies_to_host.load();
}

void emulated_device_write(void* device, const void* host, std::size_t bytes) {
  if (bytes != 0) std::memcpy(readable_or_throw(device), host, bytes);
}

std::vector<unsigned char> emulated_device_read(const void* device, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  if (bytes != 0) std::memcpy(out.data(), readable_or_throw(device), bytes);
  return out;
}

}  // namespace arcoll::testing
