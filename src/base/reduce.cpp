// Run-time dispatch of the reduction kernels, argument checks and the scalar 16-bit float
// conversions. The kernels themselves are in reduce_kernels.inc, built once per instruction set.
#include "src/base/reduce.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "src/base/reduce_kernels.hpp"

#if defined(ARCOLL_KERNELS_X86)
#include <cpuid.h>
#endif

namespace arcoll::kernels {
namespace {

static_assert(static_cast<std::size_t>(DataType::i64) + 1 == isa::kTypeCount);
static_assert(static_cast<std::size_t>(ReduceOp::max) + 1 == isa::kOpCount);
static_assert(static_cast<std::size_t>(ReduceOp::avg) == isa::kOpCount);

constexpr std::string_view kIsaNames = "generic, avx2, avx512";

bool cpu_has_avx2() {
#if defined(ARCOLL_KERNELS_X86)
  __builtin_cpu_init();  // may run before the constructors that would otherwise do it
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(ARCOLL_KERNELS_X86)
  __builtin_cpu_init();
  // The AVX-512 kernels are also built with -mavx2 -mfma -mf16c.
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && cpu_has_avx2();
#else
  return false;
#endif
}

// AddressSanitizer checks memcpy's reads and writes, not a string instruction's.
#if defined(ARCOLL_KERNELS_X86) && !defined(__SANITIZE_ADDRESS__)
#define ARCOLL_STRING_COPY 1
// Fast short REP MOVSB (CPUID leaf 7, EDX bit 4): AMD from Zen 3, Intel from Ice Lake. Zen 2
// has enhanced REP MOVSB too, in microcode slower than vector copies: it keeps memcpy.
bool cpu_has_fast_strings() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (edx & (1u << 4)) != 0;
}
#endif

enum class Lookup { found, unknown, unsupported };

// The table named `name` when this build and CPU can run it.
Lookup find_table(std::string_view name, const isa::Table*& table) {
  if (name == "generic") {
    table = &generic::table;
    return Lookup::found;
  }
  if (name == "avx2" || name == "avx512") {
#if defined(ARCOLL_KERNELS_X86)
    if (name == "avx2" && cpu_has_avx2()) {
      table = &avx2::table;
      return Lookup::found;
    }
    if (name == "avx512" && cpu_has_avx512()) {
      table = &avx512::table;
      return Lookup::found;
    }
#endif
    return Lookup::unsupported;
  }
  return Lookup::unknown;
}

const isa::Table* best_table() {
  const isa::Table* table = &generic::table;
  if (find_table("avx512", table) != Lookup::found) find_table("avx2", table);
  return table;
}

const isa::Table* startup_table() {
  const isa::Table* best = best_table();
  const char* forced = std::getenv("ARCOLL_KERNEL_ISA");
  if (forced == nullptr || *forced == '\0' || std::string_view(forced) == "auto") return best;
  const isa::Table* table = nullptr;
  switch (find_table(forced, table)) {
    case Lookup::found:
      return table;
    case Lookup::unknown:
      log::warn("ARCOLL_KERNEL_ISA=" + std::string(forced) + " is not one of " +
                std::string(kIsaNames) + " (or auto); using " + best->name);
      return best;
    case Lookup::unsupported:
      log::warn("ARCOLL_KERNEL_ISA=" + std::string(forced) +
                " ignored: this CPU or build does not support it; using " + best->name);
      return best;
  }
  return best;
}

const isa::Table* startup_choice() {
  static const isa::Table* const table = startup_table();
  return table;
}

// Set by set_instruction_set(); null: the start-up choice.
std::atomic<const isa::Table*> g_override{nullptr};

const isa::Table& active() {
  const isa::Table* table = g_override.load(std::memory_order_acquire);
  return table != nullptr ? *table : *startup_choice();
}

std::size_t type_index(DataType type, const char* operation) {
  const auto index = static_cast<std::size_t>(type);
  if (index >= isa::kTypeCount) {
    throw InvalidArgument(operation, "unknown data type (value " + std::to_string(index) + ")");
  }
  return index;
}

bool overlaps_partially(const void* x, const void* y, std::size_t bytes) {
  const auto p = reinterpret_cast<std::uintptr_t>(x);
  const auto q = reinterpret_cast<std::uintptr_t>(y);
  return p != q && p < q + bytes && q < p + bytes;
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, std::size_t count, DataType type,
            ReduceOp op, Stores stores) {
  const std::size_t t = type_index(type, "reduce");
  const auto o = static_cast<std::size_t>(op);
  if (o > static_cast<std::size_t>(ReduceOp::avg)) {
    throw InvalidArgument("reduce", "unknown reduction operator (value " + std::to_string(o) + ")");
  }
  if (op == ReduceOp::avg && !is_floating(type)) {
    throw InvalidArgument("reduce", "avg is defined for floating types only, not " +
                                        std::string(to_string(type)) +
                                        " (integer division would truncate); use sum");
  }
  if (count == 0) return;
  if (dst == nullptr || a == nullptr || b == nullptr) {
    throw InvalidArgument("reduce", "null buffer for " + std::to_string(count) + " elements");
  }
  const std::size_t bytes = count * size_of(type);
  if (overlaps_partially(dst, a, bytes) || overlaps_partially(dst, b, bytes)) {
    throw InvalidArgument("reduce",
                          "the destination overlaps an input without being the same buffer");
  }
  const isa::Table& table = active();
  const auto& kernels = stores == Stores::streaming ? table.reduce_streaming : table.reduce;
  kernels[t][op == ReduceOp::avg ? 0 : o](dst, a, b, count);
}

void copy(void* dst, const void* src, std::size_t bytes, Stores stores) {
  if (bytes == 0) return;  // an empty message's buffers may be null
  if (stores == Stores::streaming || bytes >= kStreamingStoresBytes)
    active().copy_streaming(dst, src, bytes);
  else
    copy_cached(dst, src, bytes);
}

void copy_by_string(void* dst, const void* src, std::size_t bytes) {
#if defined(ARCOLL_STRING_COPY)
  static const bool fast_strings = cpu_has_fast_strings();
  if (fast_strings) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

void divide_by(void* buf, std::size_t count, DataType type, int divisor) {
  const std::size_t t = type_index(type, "divide_by");
  const isa::DivideFn divide = active().divide[t];
  if (divide == nullptr) {
    throw InvalidArgument(
        "divide_by", "avg is defined for floating types only, not " + std::string(to_string(type)));
  }
  if (divisor < 1) {
    throw InvalidArgument("divide_by",
                          "divisor must be at least 1, got " + std::to_string(divisor));
  }
  if (count == 0) return;
  if (buf == nullptr) {
    throw InvalidArgument("divide_by", "null buffer for " + std::to_string(count) + " elements");
  }
  divide(buf, count, divisor);
}

namespace {

std::size_t wire_index(DataType wire, const char* operation) {
  if (wire == DataType::f16) return 0;
  if (wire == DataType::bf16) return 1;
  throw InvalidArgument(operation, "the wire format must be f16 or bf16, not " +
                                       std::string(to_string(wire)));
}

}  // namespace

void narrow(void* dst, DataType wire, const float* src, std::size_t count) {
  active().narrow[wire_index(wire, "narrow")](dst, src, count);
}

void widen(float* dst, const void* src, DataType wire, std::size_t count) {
  active().widen[wire_index(wire, "widen")](dst, src, count);
}

void reduce_widened(float* dst, const float* a, const void* b, DataType wire, std::size_t count,
                    ReduceOp op) {
  const auto o = static_cast<std::size_t>(op);
  active().reduce_widened[wire_index(wire, "reduce_widened")][o >= isa::kOpCount ? 0 : o](
      dst, a, b, count);
}

std::string_view instruction_set() {
  return active().name;
}

bool set_instruction_set(std::string_view name) {
  if (name == "auto") {
    g_override.store(nullptr, std::memory_order_release);
    return true;
  }
  const isa::Table* table = nullptr;
  if (find_table(name, table) != Lookup::found) return false;
  g_override.store(table, std::memory_order_release);
  return true;
}

}  // namespace arcoll::kernels

namespace arcoll {

// The public scalar conversions are the generic kernels' own.
float half_to_float(std::uint16_t bits) {
  return kernels::generic::half_to_float_scalar(bits);
}
std::uint16_t float_to_half(float value) {
  return kernels::generic::float_to_half_scalar(value);
}
float bf16_to_float(std::uint16_t bits) {
  return kernels::generic::bf16_to_float_scalar(bits);
}
std::uint16_t float_to_bf16(float value) {
  return kernels::generic::float_to_bf16_scalar(value);
}

}  // namespace arcoll
