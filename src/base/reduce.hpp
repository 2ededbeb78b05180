// Reduction kernels: the arithmetic of every collective. Built for several instruction sets
// (generic, AVX2, AVX-512) and dispatched once at run time on the CPU at hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "arcoll/types.hpp"

namespace arcoll::kernels {

// Destinations from this size on are larger than the caches: Stores::by_size streams them.
inline constexpr std::size_t kStreamingStoresBytes = std::size_t{16} << 20;

// How a kernel writes its destination.
enum class Stores : std::uint8_t {
  // Through the caches; out of place, with streaming stores (which skip the read of each line a
  // cached store makes) when the destination is kStreamingStoresBytes or more.
  by_size,
  // Streaming stores at any size: the destination is a piece of a buffer larger than the
  // caches, which nothing reads again soon (a collective's large result, landing in pieces).
  // A destination that is also an input, and 16-bit float results, keep cached stores.
  streaming,
};

// dst[i] = a[i] op b[i] for i < count. dst may alias a or b (exactly, not partially).
// ReduceOp::avg reduces as sum; the caller divides once at the end (divide_by).
// f16 and bf16 are computed in f32 and rounded to nearest even. Integer sum and prod wrap.
// min and max propagate NaN. InvalidArgument for avg on an integer type, a null buffer with
// count > 0, or partially overlapping buffers.
void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op,
            Stores stores = Stores::by_size);

// dst = src for `bytes` bytes, which must not overlap: copy_cached, or streaming stores
// (by_size: from kStreamingStoresBytes).
void copy(void* dst, const void* src, std::size_t bytes, Stores stores);

// Copies from this size on go through the CPU's string copy (rep movsb) where it has a fast one
// (FSRM), as glibc 2.36's memcpy did on an AMD EPYC (from 2,112 bytes). glibc 2.41 (Debian 13)
// copies with vector loads and stores there instead: into a ring the peer's core reads, 6-9 GB/s
// where the string copy moved 29-33 (2 ranks on an AMD EPYC; torch 2.6's all-reduce of 4 MiB
// took 717 us, 355 with the string copy). memcpy under AddressSanitizer, which checks it.
inline constexpr std::size_t kStringCopyBytes = 2048;
void copy_by_string(void* dst, const void* src, std::size_t bytes);

// dst = src through the caches; the buffers must not overlap.
inline void copy_cached(void* dst, const void* src, std::size_t bytes) {
  if (bytes >= kStringCopyBytes)
    copy_by_string(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

// buf[i] /= divisor, for floating types (the last step of avg); f16 and bf16 divide in f32.
// InvalidArgument for integer types and for divisor < 1.
void divide_by(void* buf, std::size_t count, DataType type, int divisor);

// Mixed-precision wire: f32 data carried as `wire` (f16 or bf16; InvalidArgument otherwise).
// narrow: dst (count 16-bit values) = src rounded to nearest even. widen: the way back.
// reduce_widened: dst[i] = a[i] op widen(b[i]), in f32; dst may be a.
void narrow(void* dst, DataType wire, const float* src, std::size_t count);
void widen(float* dst, const void* src, DataType wire, std::size_t count);
void reduce_widened(float* dst, const float* a, const void* b, DataType wire, std::size_t count,
                    ReduceOp op);

// Name of the instruction set the kernels run with here: "avx512", "avx2" or "generic".
// Chosen on first use: the best this CPU supports, or ARCOLL_KERNEL_ISA=generic|avx2|avx512
// when set (ignored, with a warning, if this CPU or build lacks it).
std::string_view instruction_set();

// For tests and benchmarks: run the kernels with `name` ("generic", "avx2", "avx512") from now
// on, or with the start-up choice again for "auto". False, and nothing changes, when the name
// is unknown or this CPU or build lacks that instruction set. Thread-safe; calls already
// running finish with the previous choice.
bool set_instruction_set(std::string_view name);

// The scalar f16/bf16 conversions are public: arcoll::half_to_float and friends (types.hpp).

}  // namespace arcoll::kernels
