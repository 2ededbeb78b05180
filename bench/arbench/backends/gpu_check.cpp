#include "arbench/backends/gpu_check.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

namespace arbench {

std::optional<std::string> missing_gpu(arcoll::Communicator& comm) {
  int devices = 0;
  const cudaError_t code = cudaGetDeviceCount(&devices);
  std::string why;
  if (code != cudaSuccess)
    why = std::string("no GPU (cudaGetDeviceCount failed: ") + cudaGetErrorString(code) + ")";
  else if (devices == 0)
    why = "no GPU (cudaGetDeviceCount found none)";
  std::int32_t missing = why.empty() ? 0 : 1;
  comm.allreduce(&missing, 1, arcoll::DataType::i32, arcoll::ReduceOp::max);
  if (missing == 0) return std::nullopt;
  return why.empty() ? "another rank has no GPU" : why;
}

void check_cuda(cudaError_t code, const std::string& what) {
  if (code != cudaSuccess) throw std::runtime_error(what + " failed: " + cudaGetErrorString(code));
}

}  // namespace arbench
