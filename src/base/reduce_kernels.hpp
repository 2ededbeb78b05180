// Internal interface between the run-time dispatcher (reduce.cpp) and the kernels built once
// per instruction set (reduce_isa_*.cpp, all generated from reduce_kernels.inc).
//
// Only declarations live here: the instruction-set files are compiled with different flags, so
// any inline function they shared through a header could be emitted with AVX-512 instructions
// and then picked by the linker for a caller running on a CPU without them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "src/base/reduce.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace arcoll::kernels::isa {

// dst[i] = a[i] op b[i]; dst may be a or b (or both), other overlaps are not allowed.
using ReduceFn = void (*)(void* dst, const void* a, const void* b, std::size_t count);
// buf[i] /= divisor.
using DivideFn = void (*)(void* buf, std::size_t count, int divisor);

// Indexed by the values of DataType (f32, f64, f16, bf16, i8, u8, i32, i64) and of the first
// four ReduceOp values (sum, prod, min, max); avg reduces as sum.
inline constexpr std::size_t kTypeCount = 8;
inline constexpr std::size_t kOpCount = 4;

// Mixed-precision wire formats, indexed 0: f16, 1: bf16. f32 values are narrowed for the wire
// and widened back, or reduced in f32 with a widened message: dst[i] = a[i] op widen(b[i]).
inline constexpr std::size_t kWireCount = 2;
using NarrowFn = void (*)(void* dst, const float* src, std::size_t count);
using WidenFn = void (*)(float* dst, const void* src, std::size_t count);
using ReduceWidenedFn = void (*)(float* dst, const float* a, const void* b, std::size_t count);

// dst = src for `bytes` bytes, not overlapping.
using CopyFn = void (*)(void* dst, const void* src, std::size_t bytes);

struct Table {
  const char* name;
  ReduceFn reduce[kTypeCount][kOpCount];
  // The same with streaming stores at any size (out of place; the 16-bit types keep cached
  // stores): for pieces of a destination larger than the caches.
  ReduceFn reduce_streaming[kTypeCount][kOpCount];
  CopyFn copy_streaming;
  DivideFn divide[kTypeCount];  // null for the integer types
  NarrowFn narrow[kWireCount];
  WidenFn widen[kWireCount];
  ReduceWidenedFn reduce_widened[kWireCount][kOpCount];
};

}  // namespace arcoll::kernels::isa

// Each instruction-set file defines `table` and the scalar conversions in its own namespace.
#define ARCOLL_DECLARE_KERNEL_ISA(ns)               \
  namespace arcoll::kernels::ns {                   \
  extern const ::arcoll::kernels::isa::Table table; \
  float half_to_float_scalar(std::uint16_t h);      \
  std::uint16_t float_to_half_scalar(float f);      \
  float bf16_to_float_scalar(std::uint16_t b);      \
  std::uint16_t float_to_bf16_scalar(float f);      \
  }

// avx2 and avx512 are built on x86-64 only; cmake/ReduceKernels.cmake then defines
// ARCOLL_KERNELS_X86 for reduce.cpp.
ARCOLL_DECLARE_KERNEL_ISA(generic)
ARCOLL_DECLARE_KERNEL_ISA(avx2)
ARCOLL_DECLARE_KERNEL_ISA(avx512)

#undef ARCOLL_DECLARE_KERNEL_ISA
