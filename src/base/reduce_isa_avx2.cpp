// Reduction kernels for x86-64 with AVX2, FMA and F16C (256-bit vectors, hardware f16 conversion).
#include "src/base/reduce_kernels.hpp"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "reduce_isa_avx2.cpp needs -mavx2 -mfma -mf16c (see cmake/ReduceKernels.cmake)"
#endif

namespace arcoll::kernels::avx2 {

#include "src/base/reduce_kernels.inc"

constinit const isa::Table table = make_table("avx2");

}  // namespace arcoll::kernels::avx2
