// Reduction, narrowing and widening kernels on CUDA device memory, the GPU's counterpart of
// src/base/reduce_kernels.hpp: element-wise, 16-byte loads and stores where the buffers are
// aligned to them, f16 and bf16 computed in f32 and rounded to nearest even. Each launches on
// `stream` and returns at once; errors of the launch come back as the CUDA error code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "arcoll/types.hpp"

namespace arcoll::cuda {

// into[i] = into[i] op from[i] for i < count. avg adds (the caller divides by the ranks).
cudaError_t reduce(void* into, const void* from, std::size_t count, DataType type, ReduceOp op,
                   cudaStream_t stream);
// The mixed-precision wire: f32 to `wire` (f16 or bf16) and back. With `residual`, narrowing
// adds it to each value first and leaves there what the rounding lost (error feedback).
cudaError_t narrow(std::uint16_t* out, const float* in, float* residual, std::size_t count,
                   DataType wire, cudaStream_t stream);
cudaError_t widen(float* out, const std::uint16_t* in, std::size_t count, DataType wire,
                  cudaStream_t stream);

}  // namespace arcoll::cuda
