// Whether every rank has a GPU, for the backends that need one (NCCL): built with CUDA only.
#pragma once

#include <optional>
#include <string>

#include "arcoll/communicator.hpp"

namespace arbench {

// Why some rank of `comm` has no usable GPU ("no GPU (cudaGetDeviceCount failed: ...)", or
// "another rank has no GPU"), the same answer on every rank; nullopt when each has one. A
// collective: every rank calls it.
std::optional<std::string> missing_gpu(arcoll::Communicator& comm);

}  // namespace arbench
