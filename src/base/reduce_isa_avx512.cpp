// Reduction kernels for x86-64 with AVX-512 F/BW/VL (512-bit vectors, hardware f16 conversion).
#include "src/base/reduce_kernels.hpp"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__F16C__)
#error "reduce_isa_avx512.cpp needs -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma -mf16c"
#endif

namespace arcoll::kernels::avx512 {

#include "src/base/reduce_kernels.inc"

constinit const isa::Table table = make_table("avx512");

}  // namespace arcoll::kernels::avx512
