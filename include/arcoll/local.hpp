// Reductions and copies on one rank with the kernels the collectives use (a reduction as
// MPI_Reduce_local): for combining buffers before or after a collective, filling buffers from
// mem_alloc, and measuring what the memory allows (arbench's ceiling runs them).
#pragma once

#include <cstddef>

#include "arcoll/types.hpp"

namespace arcoll {

// out[i] = a[i] op b[i] for i < count; `out` may be `a` or `b`, not partly overlap them.
// Destinations larger than the caches are written with streaming stores. InvalidArgument for
// avg (a local reduction has no world size to divide by: sum, then scale), for a type that
// `op` does not apply to, and for null buffers with a count.
void reduce_local(const void* a, const void* b, void* out, std::size_t count, DataType type,
                  ReduceOp op);

// dst = src for `bytes` bytes, which must not overlap; like memcpy, but destinations larger
// than the caches are written with streaming stores, as the collectives write large results.
// InvalidArgument for null buffers with bytes > 0.
void copy_local(void* dst, const void* src, std::size_t bytes);

}  // namespace arcoll
