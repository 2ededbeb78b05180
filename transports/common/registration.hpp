// Memory registered with a device that reads and writes it by itself (RDMA verbs), for any
// transport that needs keys for its buffers. A key must never outlive its memory: a buffer
// freed and its pages given back, then a new mapping at the same addresses, would have the
// device write through the old key into pages no longer the buffer's.
//
// So only memory whose end this process learns of is kept registered: regions of
// arcoll::mem_alloc, registered whole on first use and dropped when mem_free releases them
// (the allocator's hook, src/base/shared_memory.hpp), which is also what a program that wants its
// buffers registered once allocates. Any other memory (the heap, the stack), whose free() and
// munmap() nobody is told of, is registered for one message and deregistered when it
// completes: registration costs a system call and pinning per large message there, and no
// stale key can exist.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace arcoll::transport {

// What a device gives for registered memory.
struct MemoryKey {
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  std::uint64_t handle = 0;  // the device's own
};

class RegistrationCache {
 public:
  using Register = std::function<MemoryKey(void* address, std::size_t bytes)>;
  using Deregister = std::function<void(const MemoryKey&)>;

  // A registration of [address, address + bytes): kept (a region of mem_alloc), or for this
  // use only (`kept` false: give it back with release()).
  struct Registration {
    MemoryKey key;
    bool kept = false;
  };

  RegistrationCache(Register register_memory, Deregister deregister_memory);
  ~RegistrationCache();  // deregisters what it keeps
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  Registration acquire(void* address, std::size_t bytes);
  void release(const Registration& registration);

  // Regions kept registered now; registrations made and dropped so far (for tests).
  std::size_t kept() const;
  std::uint64_t registrations() const;
  std::uint64_t deregistrations() const;

 private:
  void forget(const char* base);  // mem_free's hook

  Register register_;
  Deregister deregister_;
  mutable std::mutex mutex_;  // mem_free may come from any thread
  std::map<const char*, MemoryKey> kept_;  // by region base
  std::uint64_t registrations_ = 0, deregistrations_ = 0;
  int listener_ = 0;
};

}  // namespace arcoll::transport
