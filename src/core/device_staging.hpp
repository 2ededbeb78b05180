// Calls on device memory (src/base/device_memory.hpp) run on host copies of their buffers: what the
// call reads is copied into pinned host buffers before its algorithm runs, what it wrote goes
// back after, so that algorithms, the engine and the transports see host memory only (the
// staged path of a GPU without a transport of its own). The pinned buffers are kept for the
// next calls.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "src/base/device_memory.hpp"

namespace arcoll {

// The bytes of a call's send and receive buffers on `rank` of `size` (0 where the rank does not
// use one: a reduce's or gather's receive buffer off the root, a scatter's send buffer).
std::pair<std::size_t, std::size_t> buffer_bytes(Collective collective, const CollectiveArgs& args,
                                                 int rank, int size);

// The memory of the buffers a call uses on `rank` (those of its bytes, above): all host memory
// (`device` null), all one kind of device memory, or more than one kind (`mixed`).
struct CallMemory {
  const DeviceMemoryInfo* device = nullptr;
  bool mixed = false;
};
CallMemory memory_of_call(Collective collective, const CollectiveArgs& args, int rank, int size);

// Copies between a buffer of any kind and host memory.
void copy_to_host(void* host, const void* from, std::size_t bytes);
void copy_from_host(void* to, const void* host, std::size_t bytes);

class DeviceStaging {
 public:
  DeviceStaging() = default;
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;
  ~DeviceStaging();

  // The host buffer the call uses for `buffer` (`bytes` long): `buffer` itself when it is host
  // memory, else a pinned one, holding its bytes when `read`, copied back by finish() when
  // `written`. A buffer inside one staged before maps into that one's copy.
  void* stage(const void* buffer, std::size_t bytes, bool read, bool written);
  // The arguments of a collective with its buffers staged; `args` when none is device memory.
  CollectiveArgs stage(Collective collective, const CollectiveArgs& args, int rank, int size);
  // Copies the written buffers back to their devices, and forgets the call's buffers.
  void finish();
  // Forgets the call's buffers without copying back (the call failed).
  void drop() { staged_.clear(); }

 private:
  struct Staged {
    const DeviceMemoryInfo* memory;
    char* device;
    char* host;
    std::size_t bytes;
    bool written;
    bool alias = true;  // inside a buffer staged before: no pinned buffer of its own
  };
  // One pinned buffer per buffer of a call, grown as calls need.
  struct Pinned {
    const DeviceMemoryInfo* memory = nullptr;
    void* host = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<Staged> staged_;
  std::vector<Pinned> pinned_;
};

}  // namespace arcoll
