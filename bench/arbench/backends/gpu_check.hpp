// What the backends on GPUs share (NCCL's, --device cuda): whether every rank has a GPU, and
// CUDA's errors as exceptions. Built with CUDA only.
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <string>

#include "arcoll/communicator.hpp"

namespace arbench {

// Why some rank of `comm` has no usable GPU ("no GPU (cudaGetDeviceCount failed: ...)", or
// "another rank has no GPU"), the same answer on every rank; nullopt when each has one. A
// collective: every rank calls it.
std::optional<std::string> missing_gpu(arcoll::Communicator& comm);

// Throws std::runtime_error "<what> failed: <CUDA's reason>" unless `code` is cudaSuccess.
void check_cuda(cudaError_t code, const std::string& what);

}  // namespace arbench
