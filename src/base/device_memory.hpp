// Memory the host cannot read, a GPU's: each kind of it registers what the library needs of it
// (whether an address is its own, copies to and from the host, pinned host memory for those
// copies). A call asks this registry once for each of its buffers; a
// build without CUDA registers nothing, and every buffer is host memory.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "arcoll/types.hpp"
#include "src/base/registry.hpp"

namespace arcoll {

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
