// What a read across processes costs beside a copy within one, which decides how the messages
// of exchanges travel (ShmTransport::single_copy_above).
#pragma once

namespace arcoll::shm {

// How many times as long the kernel takes to copy a buffer of this process's heap with
// process_vm_readv (it pins every page, 4 KiB ones unless huge pages back the heap) as a copy
// in user space takes, both within the caches: timed once per process on its own memory, the
// best of six tries of each (6 and 22 us a try on an AMD EPYC VM: about 0.2 ms in all). 0
// where it cannot read that way.
double cross_memory_copy_cost();

}  // namespace arcoll::shm
