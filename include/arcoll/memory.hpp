// Memory for buffers that the ranks of one host read from each other in place, as MPI_Alloc_mem
// and ncclMemAlloc give: a message sent from it over shared memory is read by its receiver
// straight out of the sender's buffer (reduced there, for a reducing collective), with no copy
// through the shared rings and no system call per message. Any call takes such buffers and
// ordinary ones alike; only the sender's buffer matters.
#pragma once

#include <cstddef>

namespace arcoll {

// `bytes` of zero-filled, page-aligned memory. Throws SystemError when it cannot be had.
void* mem_alloc(std::size_t bytes);
// Gives back what mem_alloc gave (null is ignored); InvalidArgument for any other pointer.
// Peers that read from it may keep its pages mapped for a while.
void mem_free(void* pointer);

}  // namespace arcoll
