// Reduction kernels for any CPU: the baseline instruction set of the target (SSE2 on x86-64),
// portable 16-bit float conversions.
#include "src/base/reduce_kernels.hpp"

namespace arcoll::kernels::generic {

#include "src/base/reduce_kernels.inc"

constinit const isa::Table table = make_table("generic");

}  // namespace arcoll::kernels::generic
