// Peers' device memory as this process opened it (DeviceMemoryShare, CUDA IPC), for the
// transports whose peers send device buffers by reference. An allocation is opened once per
// process, on its first message, and kept: opening costs far more than a message (a mapping of
// the peer's allocation into this process), and CUDA maps another process's allocation only
// once per process (a second cudaIpcOpenMemHandle fails, "already mapped"), so the openings
// are the process's, shared by its transports and closed when the last one lets go. (They are
// this copy of the library's: a module that links its own, arcoll_torch, keeps its own.)
//
// An allocation's number is never reused by its process, so a kept opening never stands for
// later memory at the same addresses: a buffer freed and allocated again comes with a new
// number and is opened anew. Its old opening is stale then, and is closed first: CUDA also
// refuses to map addresses of the peer's that an opening here still covers (seen on an H200:
// arbench's buffers freed and allocated again between sizes failed "already mapped").
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <set>
#include <utility>

#include "src/base/device_memory.hpp"

namespace arcoll::transport {

// The process that shares an allocation: its pid, when it started and its pid namespace,
// which together tell it from a pid reused since and from a process of another namespace.
struct SharingProcess {
  int pid = 0;
  std::uint64_t start = 0;
  std::uint64_t pid_namespace = 0;
  auto operator<=>(const SharingProcess&) const = default;
};

class OpenedDeviceMemory {
 public:
  // Openings one transport holds; past this many it lets go of all (a peer's freed
  // allocation stays mapped, holding its memory, while it is open here).
  static constexpr std::size_t kLimit = 64;

  OpenedDeviceMemory() = default;
  OpenedDeviceMemory(const OpenedDeviceMemory&) = delete;
  OpenedDeviceMemory& operator=(const OpenedDeviceMemory&) = delete;
  ~OpenedDeviceMemory() { release_all(); }

  // The kind that opens `share`, null when this process has none of that name.
  static const DeviceMemoryInfo* kind_of(const DeviceMemoryShare& share);
  // The buffer `share` describes, as this process reads it through `kind` (its base's opening
  // plus the offset), shared by `process` (`pidfd`) and opened on first use, for reads into
  // `near` (DeviceMemoryInfo::open: on its GPU, which later readers of the opening share).
  // Throws as open() does.
  const char* open(const DeviceMemoryInfo& kind, const SharingProcess& process, int pidfd,
                   const DeviceMemoryShare& share, const void* near);

  using Key = std::pair<SharingProcess, std::uint64_t>;  // and the allocation's number

 private:
  void release_all() noexcept;

  std::set<Key> held_;
};

}  // namespace arcoll::transport
