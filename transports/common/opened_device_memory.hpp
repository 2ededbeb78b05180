// Peers' device memory as this process opened it (DeviceMemoryShare, CUDA IPC), for a transport
// whose peers send device buffers by reference: each allocation is opened once, on its first
// message, and kept by peer and allocation. Opening costs far more than a message (a mapping
// of the peer's allocation into this process), and an allocation's number is never reused by
// its process, so a kept opening never stands for later memory at the same addresses: a buffer
// freed and allocated again comes with a new number and is opened anew.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "src/base/device_memory.hpp"

namespace arcoll::transport {

class OpenedDeviceMemory {
 public:
  // Openings kept; past this many all are closed (a peer's freed allocation stays mapped,
  // holding its memory, while it is open here).
  static constexpr std::size_t kLimit = 64;

  OpenedDeviceMemory() = default;
  OpenedDeviceMemory(const OpenedDeviceMemory&) = delete;
  OpenedDeviceMemory& operator=(const OpenedDeviceMemory&) = delete;
  ~OpenedDeviceMemory() { close_all(); }

  // The kind that opens `share`, null when this process has none of that name.
  static const DeviceMemoryInfo* kind_of(const DeviceMemoryShare& share);
  // The buffer `share` describes, as this process reads it through `kind` (its base's opening
  // plus the offset), opened from process `pid` (`pidfd`) on first use, for reads into `near`
  // (DeviceMemoryInfo::open). Throws as open() does.
  const char* open(const DeviceMemoryInfo& kind, int peer, int pid, int pidfd,
                   const DeviceMemoryShare& share, const void* near);
  std::size_t opened() const { return opened_.size(); }

 private:
  void close_all() noexcept;

  struct Opening {
    const DeviceMemoryInfo* kind;
    void* base;
  };
  std::map<std::pair<int, std::uint64_t>, Opening> opened_;  // by peer and allocation
};

}  // namespace arcoll::transport
