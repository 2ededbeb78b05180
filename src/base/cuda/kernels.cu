#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "src/base/cuda/kernels.hpp"

namespace arcoll::cuda {
namespace {

constexpr int kThreads = 512;

// f16 and bf16 travel as their bits; arithmetic on them goes through f32.
template <class T>
struct Element {
  using Math = T;
  __device__ static T load(T v) { return v; }
  __device__ static T store(T v) { return v; }
};
template <>
struct Element<__half> {
  using Math = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Element<__nv_bfloat16> {
  using Math = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

template <ReduceOp Op, class M>
__device__ M apply(M a, M b) {
  if constexpr (Op == ReduceOp::prod) return a * b;
  // NaN wins, as on the host (b != b: b is NaN).
  else if constexpr (Op == ReduceOp::min) return b < a || b != b ? b : a;
  else if constexpr (Op == ReduceOp::max) return b > a || b != b ? b : a;
  else return a + b;  // sum, avg
}

template <class T, ReduceOp Op>
__device__ T combine(T a, T b) {
  using E = Element<T>;
  return E::store(apply<Op>(E::load(a), E::load(b)));
}

// Elements of T in one 16-byte load or store.
template <class T>
constexpr int kLanes = 16 / sizeof(T);

// Vectors first (when both buffers are 16-byte aligned), then the elements past the last whole
// vector; a grid-stride loop over each.
template <class T, ReduceOp Op>
__global__ void reduce_kernel(T* into, const T* from, std::size_t count, bool vectors) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t scalar_from = 0;
  if (vectors) {
    const std::size_t n = count / kLanes<T>;
    auto* vin = reinterpret_cast<uint4*>(into);
    const auto* vfrom = reinterpret_cast<const uint4*>(from);
    for (std::size_t i = first; i < n; i += stride) {
      uint4 a = vin[i];
      const uint4 b = vfrom[i];
      auto* la = reinterpret_cast<T*>(&a);
      const auto* lb = reinterpret_cast<const T*>(&b);
#pragma unroll
      for (int l = 0; l < kLanes<T>; ++l) la[l] = combine<T, Op>(la[l], lb[l]);
      vin[i] = a;
    }
    scalar_from = n * kLanes<T>;
  }
  for (std::size_t i = scalar_from + first; i < count; i += stride)
    into[i] = combine<T, Op>(into[i], from[i]);
}

unsigned blocks_for(std::size_t work) {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  // Enough blocks to fill every multiprocessor a few times over; a grid-stride loop does the rest.
  const std::size_t wanted = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<std::size_t>(
      1, std::min<std::size_t>(wanted, static_cast<std::size_t>(std::max(sms, 1)) * 8)));
}

template <class T, ReduceOp Op>
cudaError_t launch_reduce(void* into, const void* from, std::size_t count, cudaStream_t stream) {
  const bool vectors = reinterpret_cast<std::uintptr_t>(into) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(from) % 16 == 0;
  const std::size_t work = vectors ? count / kLanes<T> + kLanes<T> : count;
  reduce_kernel<T, Op><<<blocks_for(work), kThreads, 0, stream>>>(
      static_cast<T*>(into), static_cast<const T*>(from), count, vectors);
  return cudaGetLastError();
}

template <class T>
cudaError_t reduce_typed(void* into, const void* from, std::size_t count, ReduceOp op,
                         cudaStream_t stream) {
  switch (op) {
    case ReduceOp::prod:
      return launch_reduce<T, ReduceOp::prod>(into, from, count, stream);
    case ReduceOp::min:
      return launch_reduce<T, ReduceOp::min>(into, from, count, stream);
    case ReduceOp::max:
      return launch_reduce<T, ReduceOp::max>(into, from, count, stream);
    case ReduceOp::sum:
    case ReduceOp::avg:
      return launch_reduce<T, ReduceOp::sum>(into, from, count, stream);
  }
  return cudaErrorInvalidValue;
}

template <class W>
__global__ void narrow_kernel(W* out, const float* in, float* residual, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float value = residual != nullptr ? in[i] + residual[i] : in[i];
    const W rounded = Element<W>::store(value);
    out[i] = rounded;
    if (residual != nullptr) residual[i] = value - Element<W>::load(rounded);
  }
}

template <class W>
__global__ void widen_kernel(float* out, const W* in, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride)
    out[i] = Element<W>::load(in[i]);
}

}  // namespace

cudaError_t reduce(void* into, const void* from, std::size_t count, DataType type, ReduceOp op,
                   cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  switch (type) {
    case DataType::f32:
      return reduce_typed<float>(into, from, count, op, stream);
    case DataType::f64:
      return reduce_typed<double>(into, from, count, op, stream);
    case DataType::f16:
      return reduce_typed<__half>(into, from, count, op, stream);
    case DataType::bf16:
      return reduce_typed<__nv_bfloat16>(into, from, count, op, stream);
    case DataType::i8:
      return reduce_typed<std::int8_t>(into, from, count, op, stream);
    case DataType::u8:
      return reduce_typed<std::uint8_t>(into, from, count, op, stream);
    case DataType::i32:
      return reduce_typed<std::int32_t>(into, from, count, op, stream);
    case DataType::i64:
      return reduce_typed<std::int64_t>(into, from, count, op, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t narrow(std::uint16_t* out, const float* in, float* residual, std::size_t count,
                   DataType wire, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (wire == DataType::f16)
    narrow_kernel<<<blocks_for(count), kThreads, 0, stream>>>(reinterpret_cast<__half*>(out), in,
                                                              residual, count);
  else if (wire == DataType::bf16)
    narrow_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        reinterpret_cast<__nv_bfloat16*>(out), in, residual, count);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t widen(float* out, const std::uint16_t* in, std::size_t count, DataType wire,
                  cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (wire == DataType::f16)
    widen_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        out, reinterpret_cast<const __half*>(in), count);
  else if (wire == DataType::bf16)
    widen_kernel<<<blocks_for(count), kThreads, 0, stream>>>(
        out, reinterpret_cast<const __nv_bfloat16*>(in), count);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace arcoll::cuda
