// Memory the host cannot read, a GPU's: each kind of it registers what the library needs of it
// (whether an address is its own, copies to and from the host, pinned host memory for those
// copies, and where it can, sharing a buffer with another process of the host). A call asks
// this registry once for each of its buffers; a build without CUDA registers nothing, and
// every buffer is host memory.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "arcoll/types.hpp"
#include "src/base/registry.hpp"

namespace arcoll {

// A buffer of device memory as another process of the host opens it (CUDA IPC): what a kind's
// share() writes and its open() reads, carried between processes as it is.
struct DeviceMemoryShare {
  std::array<char, 16> kind{};  // the kind's name, which the other process opens it with
  // Unique within the sharing process and never reused: an opening of the allocation kept by
  // another process never serves a later allocation at the same addresses.
  std::uint64_t allocation = 0;
  std::uint64_t base = 0;              // the allocation's address in the sharing process
  std::uint64_t offset = 0;            // of the buffer within its allocation
  std::uint64_t bytes = 0;             // of the allocation
  std::array<std::byte, 64> handle{};  // the kind's own (cudaIpcMemHandle_t)
};
static_assert(sizeof(DeviceMemoryShare) == 112);

struct DeviceMemoryInfo {
  static constexpr const char* kKind = "device memory";
  std::string name;  // "cuda"
  // Whether `address` lies in this kind's device memory (not in host memory it maps or pins).
  std::function<bool(const void* address)> owns;
  // Copies between its memory and the host's; they return once the bytes are there.
  std::function<void(void* host, const void* device, std::size_t bytes)> to_host;
  std::function<void(void* device, const void* host, std::size_t bytes)> to_device;
  // Host memory those copies run at full speed from and to (pinned), and its release.
  std::function<void*(std::size_t bytes)> allocate_host;
  std::function<void(void* host)> free_host;
  // Sharing with the other processes of the host; all five null where the kind cannot.
  // Whether share() can describe the buffer at `device` (CUDA: not memory of a stream-ordered
  // pool or of virtual memory management, which cudaIpcGetMemHandle refuses).
  std::function<bool(const void* device)> shareable;
  // Describes the allocation holding `device` once the work queued on the device before is
  // done, for a peer to read it.
  std::function<void(const void* device, DeviceMemoryShare& share)> share;
  // The shared allocation's base in this process, opened from process `pid` (`pidfd`, -1
  // where there is none) for reads into `near` (a buffer on the device to read it from, or
  // host memory); throws SystemError where it cannot be opened (the process is gone).
  std::function<void*(const DeviceMemoryShare& share, int pid, int pidfd, const void* near)> open;
  std::function<void(void* opened)> close;
  // Copies where either side, or both, is this kind's memory (an opened share too), and
  // returns once the bytes are there.
  std::function<void(void* to, const void* from, std::size_t bytes)> copy;
  // For calls that run on the device (shared with their peers, above): scratch memory of this
  // kind on the device holding `near`, and its release; out[i] = with[i] op from[i] for
  // `count` elements, `out` and `with` this kind's memory, `from` too or host memory (avg
  // adds: the caller divides), returning once done.
  std::function<void*(std::size_t bytes, const void* near)> allocate;
  std::function<void(void* device)> free;
  std::function<void(void* out, const void* with, const void* from, std::size_t count,
                     DataType type, ReduceOp op)>
      reduce;
};
using DeviceMemoryRegistry = Registry<DeviceMemoryInfo>;
using DeviceMemoryRegistrar = Registrar<DeviceMemoryInfo>;

// The kind of device memory `address` lies in, or nullptr for host memory.
// The kinds register before main(): their list is read once, not on every call.
inline const DeviceMemoryInfo* device_memory_of(const void* address) {
  static const std::vector<const DeviceMemoryInfo*> kinds = DeviceMemoryRegistry::instance().all();
  if (address == nullptr) return nullptr;
  for (const DeviceMemoryInfo* kind : kinds)
    if (kind->owns(address)) return kind;
  return nullptr;
}

}  // namespace arcoll
