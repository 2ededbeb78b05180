// Whether the kernel backs large buffers with huge pages unasked (transparent huge pages
// "always"): a read across processes (process_vm_readv) then pins a page per 2 MiB, not per
// 4 KiB, and beyond the caches it beats copying through shared memory, which it loses to in
// 4 KiB pages (shm's and UCX's choices of how large copies travel).
#pragma once

namespace arcoll::transport {

bool huge_pages_unasked();

}  // namespace arcoll::transport
