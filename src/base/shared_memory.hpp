// Memory the other processes of a host can map: each allocation is a memfd of its own,
// mapped here and recorded in a process-wide table, so that a transport can tell whether a
// buffer lies in one and hand a peer what it needs to map it (the fd, which the peer takes
// with pidfd_getfd). A peer then reads the buffer in place: no copy through shared rings and
// no system call per message (as MPI_Alloc_mem and NCCL's registered buffers allow).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

namespace arcoll::shared_memory {

struct Region {
  std::uint64_t id = 0;  // unique within the process, never reused
  int fd = -1;           // the memfd, open for the allocation's lifetime
  const char* base = nullptr;
  std::size_t bytes = 0;
};

// Page-aligned, zero-filled. Throws SystemError when the memory cannot be had; bytes 0 gives
// a region of one page.
void* allocate(std::size_t bytes);
// What allocate() gave; InvalidArgument for anything else (null is ignored).
void release(void* pointer);
// The region holding all of [pointer, pointer + bytes), if any.
std::optional<Region> find(const void* pointer, std::size_t bytes);

// Called with each region release() is about to unmap, before it does (a transport's cache of
// memory registered with its device drops the region's registration then, the allocator's
// hook that keeps a key from outliving its memory). Returns an id for remove_release_listener.
int add_release_listener(std::function<void(const Region&)> listener);
void remove_release_listener(int id);

}  // namespace arcoll::shared_memory
