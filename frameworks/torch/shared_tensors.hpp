// Zero-copy buckets, an opt-in: torch's CPU tensors of at least a threshold come from memory the
// ranks of a host map from each other (arcoll::mem_alloc), so that arcoll's shared-memory
// transport reads DDP's buckets and FSDP's shards in place, reduced straight out of the
// sender's tensor, instead of copying them through its rings. Smaller tensors, and all of them
// while it is off, come from the allocator torch had.
#pragma once

#include <cstddef>

namespace at {
class Tensor;
}

namespace arcoll::torch_backend {

// From now on, CPU tensors of `min_bytes` or more are shared; 0 turns it off (tensors made
// meanwhile stay shared until freed). ARCOLL_TORCH_SHARED_TENSORS sets it at import.
void share_cpu_tensors(std::size_t min_bytes);
// The threshold in force, 0 when off.
std::size_t shared_cpu_tensor_bytes();
// Whether the storage of `tensor` lies in such memory.
bool is_shared(const at::Tensor& tensor);

}  // namespace arcoll::torch_backend
