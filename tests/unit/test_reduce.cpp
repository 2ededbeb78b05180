// Reduction kernels and 16-bit float conversions, for every instruction set this CPU has.
//
// Every expected value is computed here, independently of the library: floating inputs are
// decoded from their bits into long double (exact), the operation is done in long double
// (__float128 for f64), then rounded to the element format by round_to() below (nearbyintl,
// round to nearest even). The wider type has at least twice the format's precision plus two
// bits, so rounding its result once more gives the correctly rounded answer. Integers are
// computed in __int128 and wrapped explicitly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "arcoll/error.hpp"
#include "arcoll/types.hpp"
#include "src/base/reduce.hpp"

namespace arcoll::kernels {
namespace {

#if defined(__SIZEOF_FLOAT128__)
using Wide = __float128;  // 113-bit significand: exact reference for f64
#else
using Wide = long double;  // IEEE quad on the 64-bit targets without __float128
#endif

constexpr const char* kIsas[] = {"generic", "avx2", "avx512"};
constexpr std::size_t kCounts[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 127, 1000, 4097};

// ---------------------------------------------------------------------------------------------
// Element formats.

struct Format {
  DataType type;
  std::size_t size;
  bool floating;
  int exponent_bits;  // floating formats
  int mantissa_bits;  // stored significand bits (floating), or value bits (integers)
  bool is_signed;     // integers
};

constexpr Format kFormats[] = {
    {DataType::f32, 4, true, 8, 23, true},  {DataType::f64, 8, true, 11, 52, true},
    {DataType::f16, 2, true, 5, 10, true},  {DataType::bf16, 2, true, 8, 7, true},
    {DataType::i8, 1, false, 0, 8, true},   {DataType::u8, 1, false, 0, 8, false},
    {DataType::i32, 4, false, 0, 32, true}, {DataType::i64, 8, false, 0, 64, true},
};

constexpr Format kHalf = kFormats[2];
constexpr Format kBf16 = kFormats[3];

int bias(const Format& f) {
  return (1 << (f.exponent_bits - 1)) - 1;
}
std::uint64_t low_mask(int bits) {
  return bits >= 64 ? ~0ull : (1ull << bits) - 1;
}

std::uint64_t load_bits(const unsigned char* p, std::size_t size) {
  switch (size) {
    case 1: {
      std::uint8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

void store_bits(unsigned char* p, std::size_t size, std::uint64_t bits) {
  switch (size) {
    case 1: {
      const auto v = static_cast<std::uint8_t>(bits);
      std::memcpy(p, &v, 1);
      break;
    }
    case 2: {
      const auto v = static_cast<std::uint16_t>(bits);
      std::memcpy(p, &v, 2);
      break;
    }
    case 4: {
      const auto v = static_cast<std::uint32_t>(bits);
      std::memcpy(p, &v, 4);
      break;
    }
    default:
      std::memcpy(p, &bits, 8);
  }
}

// The value of a floating-point bit pattern, from the IEEE layout alone.
long double decode_float(std::uint64_t bits, const Format& f) {
  const std::uint64_t mantissa = bits & low_mask(f.mantissa_bits);
  const std::uint64_t exponent = (bits >> f.mantissa_bits) & low_mask(f.exponent_bits);
  const bool negative = (bits >> (f.mantissa_bits + f.exponent_bits)) & 1;
  long double v;
  if (exponent == low_mask(f.exponent_bits)) {
    v = mantissa != 0 ? std::numeric_limits<long double>::quiet_NaN()
                      : std::numeric_limits<long double>::infinity();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<long double>(mantissa), 1 - bias(f) - f.mantissa_bits);
  } else {
    v = std::ldexp(static_cast<long double>(mantissa | (1ull << f.mantissa_bits)),
                   static_cast<int>(exponent) - bias(f) - f.mantissa_bits);
  }
  return negative ? -v : v;
}

bool is_nan_bits(std::uint64_t bits, const Format& f) {
  const std::uint64_t exponent = (bits >> f.mantissa_bits) & low_mask(f.exponent_bits);
  return exponent == low_mask(f.exponent_bits) && (bits & low_mask(f.mantissa_bits)) != 0;
}

// x rounded to the format (nearest, ties to even; beyond the largest finite: infinity).
long double round_to(long double x, const Format& f) {
  if (x == 0 || std::isnan(x) || std::isinf(x)) return x;
  const int precision = f.mantissa_bits + 1;
  const int min_exponent = 1 - bias(f);
  int e;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const int lead = std::max(e - 1, min_exponent);
  const long double r =
      std::ldexp(std::nearbyint(std::ldexp(x, precision - 1 - lead)), lead - (precision - 1));
  const long double max_finite = std::ldexp(2.0L - std::ldexp(1.0L, 1 - precision), bias(f));
  if (std::fabs(r) > max_finite)
    return std::copysign(std::numeric_limits<long double>::infinity(), x);
  return r;
}

// Integer value of a bit pattern (sign-extended for signed types).
__int128 decode_int(std::uint64_t bits, const Format& f) {
  const std::uint64_t v = bits & low_mask(f.mantissa_bits);
  if (f.is_signed && f.mantissa_bits < 64 && (v >> (f.mantissa_bits - 1)) != 0) {
    return static_cast<__int128>(v) - (static_cast<__int128>(1) << f.mantissa_bits);
  }
  if (f.is_signed && f.mantissa_bits == 64) return static_cast<std::int64_t>(v);
  return static_cast<__int128>(v);
}

// v modulo 2^bits, as the type's bit pattern.
std::uint64_t wrap(__int128 v, const Format& f) {
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(v)) & low_mask(f.mantissa_bits);
}

// ---------------------------------------------------------------------------------------------
// Expected results.

// The documented semantics: NaN propagates (first operand's when both are); on equality, +0 and
// -0 included, the second operand.
long double pick_min_max(long double x, long double y, bool is_min) {
  if (std::isnan(x)) return x;
  if (std::isnan(y)) return y;
  return (is_min ? x < y : x > y) ? x : y;
}

// Expected value of x op y for a floating format (NaN when the result is any NaN).
long double expected_float(const Format& f, ReduceOp op, long double x, long double y) {
  if (op == ReduceOp::min || op == ReduceOp::max) return pick_min_max(x, y, op == ReduceOp::min);
  const bool product = op == ReduceOp::prod;
  if (f.type == DataType::f64) {
    const Wide wx = x;
    const Wide wy = y;
    return static_cast<double>(product ? wx * wy : wx + wy);
  }
  return round_to(product ? x * y : x + y, f);
}

long double expected_quotient(const Format& f, long double x, int divisor) {
  if (f.type == DataType::f64) return static_cast<double>(static_cast<Wide>(x) / divisor);
  return round_to(x / divisor, f);
}

std::uint64_t expected_int(const Format& f, ReduceOp op, std::uint64_t xb, std::uint64_t yb) {
  const __int128 x = decode_int(xb, f);
  const __int128 y = decode_int(yb, f);
  switch (op) {
    case ReduceOp::prod: {
      // The product of two 64-bit values needs 128 bits: multiply unsigned, keep the low bits.
      const auto ux = static_cast<unsigned __int128>(x);
      const auto uy = static_cast<unsigned __int128>(y);
      return static_cast<std::uint64_t>(ux * uy) & low_mask(f.mantissa_bits);
    }
    case ReduceOp::min:
      return wrap(x < y ? x : y, f);
    case ReduceOp::max:
      return wrap(x > y ? x : y, f);
    default:
      return wrap(x + y, f);
  }
}

std::string describe(const Format& f, std::uint64_t bits) {
  std::ostringstream out;
  out << "0x" << std::hex << bits << std::dec;
  if (f.floating) {
    out << " (" << static_cast<double>(decode_float(bits, f)) << ")";
  } else {
    out << " (" << static_cast<long long>(decode_int(bits, f)) << ")";
  }
  return out.str();
}

// Whether the element `got` is the expected floating value: same value and sign, or both NaN.
bool float_matches(const Format& f, std::uint64_t got, long double expected) {
  if (std::isnan(expected)) return is_nan_bits(got, f);
  const long double value = decode_float(got, f);
  return value == expected && std::signbit(value) == std::signbit(expected);
}

// ---------------------------------------------------------------------------------------------
// Test data.

std::uint64_t random_float_bits(std::mt19937_64& rng, const Format& f) {
  const std::uint64_t max_exponent = low_mask(f.exponent_bits);
  const std::uint64_t b = static_cast<std::uint64_t>(bias(f));
  std::uint64_t exponent;
  std::uint64_t mantissa = rng() & low_mask(f.mantissa_bits);
  const int kind = static_cast<int>(rng() % 100);
  if (kind < 60) {
    exponent = b - 3 + rng() % 7;  // magnitudes in [1/8, 16): sums and products stay finite
  } else if (kind < 72) {
    exponent = 1 + rng() % (max_exponent - 1);  // any normal number
  } else if (kind < 78) {
    exponent = 0;  // subnormal or zero
  } else if (kind < 82) {
    exponent = 0;
    mantissa = 0;  // +-0
  } else if (kind < 88) {
    exponent = max_exponent - 1 - rng() % 2;  // close to overflow
  } else if (kind < 92) {
    exponent = max_exponent;  // +-infinity
    mantissa = 0;
  } else if (kind < 94) {
    exponent = max_exponent;  // NaN, quiet or signalling
    mantissa |= 1;
  } else {
    exponent = b + rng() % 4;  // few significant bits: exact sums, ties after a division
    mantissa &= ~low_mask(f.mantissa_bits - 3);
  }
  const std::uint64_t sign = rng() & 1;
  return (sign << (f.exponent_bits + f.mantissa_bits)) | (exponent << f.mantissa_bits) | mantissa;
}

std::uint64_t random_int_bits(std::mt19937_64& rng, const Format& f) {
  const int kind = static_cast<int>(rng() % 10);
  const std::uint64_t mask = low_mask(f.mantissa_bits);
  if (kind == 0) return 0;
  if (kind == 1) return mask;                       // -1 or the unsigned maximum
  if (kind == 2) return (mask >> 1) + (rng() & 1);  // the signed maximum / minimum
  if (kind < 5) return (static_cast<std::uint64_t>(rng() % 7) - 3) & mask;  // small values
  return rng() & mask;
}

struct Buffer {
  // Elements live at data() .. data() + count * size; `guard` elements on each side must survive.
  static constexpr std::size_t kGuard = 8;
  static constexpr unsigned char kGuardByte = 0xa5;

  Buffer(const Format& f, std::size_t count, std::size_t offset)
      : format(f),
        count(count),
        offset(offset),
        bytes((count + 2 * kGuard + offset) * f.size, kGuardByte) {}

  unsigned char* data() { return bytes.data() + (kGuard + offset) * format.size; }
  std::uint64_t get(std::size_t i) const {
    return load_bits(bytes.data() + (kGuard + offset + i) * format.size, format.size);
  }
  void set(std::size_t i, std::uint64_t bits) {
    store_bits(bytes.data() + (kGuard + offset + i) * format.size, format.size, bits);
  }
  bool guards_intact() const {
    const std::size_t head = (kGuard + offset) * format.size;
    const std::size_t tail = head + count * format.size;
    for (std::size_t i = 0; i < head; ++i) {
      if (bytes[i] != kGuardByte) return false;
    }
    for (std::size_t i = tail; i < bytes.size(); ++i) {
      if (bytes[i] != kGuardByte) return false;
    }
    return true;
  }

  Format format;
  std::size_t count;
  std::size_t offset;
  std::vector<unsigned char> bytes;
};

Buffer random_buffer(const Format& f, std::size_t count, std::size_t offset, std::mt19937_64& rng) {
  Buffer b(f, count, offset);
  for (std::size_t i = 0; i < count; ++i) {
    b.set(i, f.floating ? random_float_bits(rng, f) : random_int_bits(rng, f));
  }
  return b;
}

enum class Aliasing { none, dst_is_a, dst_is_b, dst_is_a_and_b };
constexpr Aliasing kAliasings[] = {Aliasing::none, Aliasing::dst_is_a, Aliasing::dst_is_b,
                                   Aliasing::dst_is_a_and_b};

const char* to_cstr(Aliasing a) {
  switch (a) {
    case Aliasing::none:
      return "dst separate";
    case Aliasing::dst_is_a:
      return "dst == a";
    case Aliasing::dst_is_b:
      return "dst == b";
    case Aliasing::dst_is_a_and_b:
      return "dst == a == b";
  }
  return "?";
}

// Checks result[i] == a[i] op b[i] (then / divisor when divisor > 0) for every element.
::testing::AssertionResult check_elements(const Format& f, ReduceOp op, const Buffer& a,
                                          const Buffer& b, const Buffer& result, int divisor) {
  if (!result.guards_intact()) {
    return ::testing::AssertionFailure() << "bytes outside the destination were written";
  }
  for (std::size_t i = 0; i < a.count; ++i) {
    const std::uint64_t x = a.get(i);
    const std::uint64_t y = b.get(i);
    const std::uint64_t got = result.get(i);
    bool ok;
    long double expected_float_value = 0;
    std::uint64_t expected_int_bits = 0;
    if (f.floating) {
      const ReduceOp reduce_op = op == ReduceOp::avg ? ReduceOp::sum : op;
      expected_float_value = expected_float(f, reduce_op, decode_float(x, f), decode_float(y, f));
      if (divisor > 0) expected_float_value = expected_quotient(f, expected_float_value, divisor);
      ok = float_matches(f, got, expected_float_value);
    } else {
      expected_int_bits = expected_int(f, op, x, y);
      ok = got == expected_int_bits;
    }
    if (!ok) {
      const std::string expected_text =
          f.floating ? std::to_string(static_cast<double>(expected_float_value))
                     : describe(f, expected_int_bits);
      return ::testing::AssertionFailure()
             << "element " << i << ": " << describe(f, x) << " " << to_string(op) << " "
             << describe(f, y) << (divisor > 0 ? " / " + std::to_string(divisor) : "") << " gave "
             << describe(f, got) << ", expected " << expected_text;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// Kernels, once per instruction set.

class ReduceKernels : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!set_instruction_set(GetParam())) {
      GTEST_SKIP() << GetParam() << " is not supported by this CPU or build";
    }
    ASSERT_EQ(instruction_set(), GetParam());
  }
  void TearDown() override { set_instruction_set("auto"); }

  // Runs one reduction with the given aliasing and checks every element and the guards.
  void run_case(const Format& f, ReduceOp op, std::size_t count, Aliasing aliasing,
                std::mt19937_64& rng, Stores stores = Stores::by_size) {
    SCOPED_TRACE(::testing::Message()
                 << to_string(f.type) << " " << to_string(op) << " count " << count << ", "
                 << to_cstr(aliasing) << (stores == Stores::streaming ? ", streaming" : ""));
    const std::size_t offset = count % 3;  // unaligned starts too
    Buffer a = random_buffer(f, count, offset, rng);
    Buffer b = aliasing == Aliasing::dst_is_a_and_b ? a : random_buffer(f, count, 0, rng);
    Buffer result(f, count, (offset + 1) % 3);
    unsigned char* dst = result.data();
    const unsigned char* in_a = a.data();
    const unsigned char* in_b = b.data();
    switch (aliasing) {
      case Aliasing::none:
        break;
      case Aliasing::dst_is_a:
        result = a;
        dst = result.data();
        in_a = dst;
        break;
      case Aliasing::dst_is_b:
        result = b;
        dst = result.data();
        in_b = dst;
        break;
      case Aliasing::dst_is_a_and_b:
        result = a;
        dst = result.data();
        in_a = dst;
        in_b = dst;
        break;
    }
    if (op == ReduceOp::avg && !f.floating) {
      EXPECT_THROW(reduce(dst, in_a, in_b, count, f.type, op), InvalidArgument);
      reduce(dst, in_a, in_b, count, f.type, ReduceOp::sum);
      EXPECT_THROW(divide_by(dst, count, f.type, 2), InvalidArgument);
      return;
    }
    reduce(dst, in_a, in_b, count, f.type, op, stores);
    int divisor = 0;
    if (op == ReduceOp::avg) {
      divisor = 1 + static_cast<int>(count % 7);
      divide_by(dst, count, f.type, divisor);
    }
    EXPECT_TRUE(check_elements(f, op, a, b, result, divisor));
  }
};

TEST_P(ReduceKernels, EveryTypeOpCountAndAliasingMatchesReference) {
  std::mt19937_64 rng(12345);
  for (const Format& f : kFormats) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::size_t count : kCounts) {
        for (Aliasing aliasing : kAliasings) run_case(f, op, count, aliasing, rng);
      }
    }
  }
}

TEST_P(ReduceKernels, LargeBuffersMatchReference) {
  std::mt19937_64 rng(777);
  for (const Format& f : kFormats) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) run_case(f, op, 100003, Aliasing::none, rng);
  }
}

// Out-of-place destinations of 16 MiB and more are written with streaming stores, in chunks,
// after a head of plain stores up to a 64-byte boundary (run_case offsets the destination by
// one element from its buffer's start) and with a plain tail.
TEST_P(ReduceKernels, StreamingStoresOnVeryLargeBuffers) {
  std::mt19937_64 rng(4242);
  const std::size_t count = (std::size_t{16} << 20) / 4 + 1001;
  run_case(kFormats[0], ReduceOp::sum, count, Aliasing::none, rng);  // f32
  run_case(kFormats[6], ReduceOp::max, count, Aliasing::none, rng);  // i32
}

// Streaming stores asked for at any size (the pieces of a collective's large result): a head
// of plain stores up to a 64-byte boundary, whole chunks streamed, a plain tail; in place and
// 16-bit results keep cached stores. Same results as by_size.
TEST_P(ReduceKernels, StreamingStoresAtEveryCountMatchReference) {
  std::mt19937_64 rng(2718);
  for (const Format& f : kFormats) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::avg}) {
      for (std::size_t count : kCounts) {
        for (Aliasing aliasing : {Aliasing::none, Aliasing::dst_is_a})
          run_case(f, op, count, aliasing, rng, Stores::streaming);
      }
      run_case(f, op, 100003, Aliasing::none, rng, Stores::streaming);
    }
  }
}

// copy: every length around the 64-byte lines, from and to every alignment within a line,
// the bytes around the destination untouched.
TEST_P(ReduceKernels, StreamingCopyMatchesMemcpy) {
  std::mt19937_64 rng(31415);
  constexpr std::size_t kGuard = 64;
  constexpr std::size_t kBytes[] = {0, 1, 7, 63, 64, 65, 127, 128, 129, 1000, 4096, 65536 + 13};
  constexpr std::size_t kDestinationOffsets[] = {0, 1, 8, 33, 63};
  constexpr std::size_t kSourceOffsets[] = {0, 5, 32};
  for (std::size_t bytes : kBytes) {
    for (std::size_t dst_offset : kDestinationOffsets) {
      for (std::size_t src_offset : kSourceOffsets) {
        SCOPED_TRACE(::testing::Message()
                     << bytes << " B, destination +" << dst_offset << ", source +" << src_offset);
        std::vector<unsigned char> src(src_offset + bytes);
        for (auto& b : src) b = static_cast<unsigned char>(rng());
        // 64-byte aligned storage, so that the offsets are offsets within a line.
        std::vector<std::uint64_t> storage((kGuard * 2 + 128 + bytes) / 8 + 1);
        auto* base = reinterpret_cast<unsigned char*>(storage.data());
        base += (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
        unsigned char* dst = base + kGuard + dst_offset;
        std::memset(base, 0xA5, kGuard * 2 + dst_offset + bytes);
        copy(dst, src.data() + src_offset, bytes, Stores::streaming);
        EXPECT_TRUE(bytes == 0 || std::memcmp(dst, src.data() + src_offset, bytes) == 0);
        for (std::size_t i = 0; i < kGuard + dst_offset; ++i) ASSERT_EQ(base[i], 0xA5) << i;
        for (std::size_t i = 0; i < kGuard; ++i) ASSERT_EQ(dst[bytes + i], 0xA5) << i;
      }
    }
  }
}

TEST_P(ReduceKernels, MinMaxPropagateNaN) {
  for (const Format& f : kFormats) {
    if (!f.floating) continue;
    SCOPED_TRACE(to_string(f.type));
    const std::uint64_t nan = (low_mask(f.exponent_bits) << f.mantissa_bits) | 1;
    const std::uint64_t one = static_cast<std::uint64_t>(bias(f)) << f.mantissa_bits;
    // Several positions so that both the vector body and the scalar tail see NaN.
    const std::size_t count = 37;
    Buffer a(f, count, 0);
    Buffer b(f, count, 0);
    for (std::size_t i = 0; i < count; ++i) {
      a.set(i, i % 3 == 0 ? nan : one);
      b.set(i, i % 3 == 1 ? nan : one);
    }
    for (ReduceOp op : {ReduceOp::min, ReduceOp::max}) {
      Buffer result(f, count, 0);
      reduce(result.data(), a.data(), b.data(), count, f.type, op);
      for (std::size_t i = 0; i < count; ++i) {
        EXPECT_EQ(is_nan_bits(result.get(i), f), i % 3 != 2) << to_string(op) << " element " << i;
      }
    }
  }
}

// Every f16 / bf16 pattern through the instruction set's widen and narrow: max(x, x) == x.
TEST_P(ReduceKernels, SixteenBitFormatsRoundTripEveryPattern) {
  for (const Format& f : {kHalf, kBf16}) {
    SCOPED_TRACE(to_string(f.type));
    std::vector<std::uint16_t> in(65536);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i);
    std::vector<std::uint16_t> out(in.size());
    reduce(out.data(), in.data(), in.data(), in.size(), f.type, ReduceOp::max);
    std::vector<std::uint16_t> divided = in;
    divide_by(divided.data(), divided.size(), f.type, 1);
    for (std::size_t i = 0; i < in.size(); ++i) {
      if (is_nan_bits(in[i], f)) {
        EXPECT_TRUE(is_nan_bits(out[i], f)) << "max, pattern " << describe(f, in[i]);
        EXPECT_TRUE(is_nan_bits(divided[i], f)) << "divide, pattern " << describe(f, in[i]);
      } else {
        ASSERT_EQ(out[i], in[i]) << "max, pattern " << describe(f, in[i]);
        ASSERT_EQ(divided[i], in[i]) << "divide, pattern " << describe(f, in[i]);
      }
    }
  }
}

// Every f16 / bf16 pattern plus operands that exercise the rounding of the result: the
// smallest subnormal, one, values that create ties, the largest finite (overflow to infinity).
TEST_P(ReduceKernels, SixteenBitSumAndProductRoundEveryPattern) {
  for (const Format& f : {kHalf, kBf16}) {
    const std::uint64_t one = static_cast<std::uint64_t>(bias(f)) << f.mantissa_bits;
    const std::uint64_t max_finite =
        ((low_mask(f.exponent_bits) - 1) << f.mantissa_bits) | low_mask(f.mantissa_bits);
    const std::uint64_t sign = 1ull << (f.exponent_bits + f.mantissa_bits);
    const std::uint64_t operands[] = {1,
                                      one,
                                      one | 1,
                                      one | sign,
                                      one + (3ull << f.mantissa_bits) + 1,
                                      max_finite,
                                      (1ull << f.mantissa_bits) | 1 | sign};
    Buffer a(f, 65536, 0);
    for (std::size_t i = 0; i < 65536; ++i) a.set(i, i);
    for (std::uint64_t operand : operands) {
      Buffer b(f, 65536, 0);
      for (std::size_t i = 0; i < 65536; ++i) b.set(i, operand);
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod}) {
        SCOPED_TRACE(::testing::Message()
                     << to_string(f.type) << " " << to_string(op) << " " << describe(f, operand));
        Buffer result(f, 65536, 0);
        reduce(result.data(), a.data(), b.data(), 65536, f.type, op);
        EXPECT_TRUE(check_elements(f, op, a, b, result, 0));
      }
    }
  }
}

TEST_P(ReduceKernels, DivideByRoundsEveryFloatingType) {
  std::mt19937_64 rng(99);
  for (const Format& f : kFormats) {
    if (!f.floating) continue;
    for (int divisor : {1, 2, 3, 5, 7, 10, 1000}) {
      SCOPED_TRACE(::testing::Message() << to_string(f.type) << " / " << divisor);
      const std::size_t count = 4099;
      Buffer a = random_buffer(f, count, 1, rng);
      Buffer zero(f, count, 0);
      for (std::size_t i = 0; i < count; ++i) zero.set(i, 0);
      Buffer result = a;
      divide_by(result.data(), count, f.type, divisor);
      // a + 0 is a (except -0 + 0 = +0, which the reference knows too).
      Buffer summed = a;
      reduce(summed.data(), a.data(), zero.data(), count, f.type, ReduceOp::sum);
      divide_by(summed.data(), count, f.type, divisor);
      EXPECT_TRUE(check_elements(f, ReduceOp::avg, a, zero, summed, divisor));
      for (std::size_t i = 0; i < count; ++i) {
        const long double expected = expected_quotient(f, decode_float(a.get(i), f), divisor);
        ASSERT_TRUE(float_matches(f, result.get(i), expected))
            << describe(f, a.get(i)) << " / " << divisor << " gave " << describe(f, result.get(i));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(InstructionSets, ReduceKernels, ::testing::ValuesIn(kIsas),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// ---------------------------------------------------------------------------------------------
// Arguments, dispatch.

TEST(ReduceArguments, RejectIntegerAvgNullBuffersAndBadValues) {
  std::int32_t x[4] = {1, 2, 3, 4};
  std::int32_t y[4] = {5, 6, 7, 8};
  for (DataType type : kAllDataTypes) {
    if (is_floating(type)) continue;
    EXPECT_THROW(reduce(x, x, y, 1, type, ReduceOp::avg), InvalidArgument) << to_string(type);
    EXPECT_THROW(divide_by(x, 1, type, 2), InvalidArgument) << to_string(type);
  }
  EXPECT_THROW(reduce(nullptr, x, y, 4, DataType::i32, ReduceOp::sum), InvalidArgument);
  EXPECT_THROW(reduce(x, nullptr, y, 4, DataType::i32, ReduceOp::sum), InvalidArgument);
  EXPECT_THROW(reduce(x, x, nullptr, 4, DataType::i32, ReduceOp::sum), InvalidArgument);
  EXPECT_NO_THROW(reduce(nullptr, nullptr, nullptr, 0, DataType::f32, ReduceOp::sum));
  EXPECT_THROW(reduce(x, x, y, 4, static_cast<DataType>(200), ReduceOp::sum), InvalidArgument);
  EXPECT_THROW(reduce(x, x, y, 4, DataType::i32, static_cast<ReduceOp>(200)), InvalidArgument);

  float f[8] = {};
  EXPECT_THROW(divide_by(f, 8, DataType::f32, 0), InvalidArgument);
  EXPECT_THROW(divide_by(f, 8, DataType::f32, -2), InvalidArgument);
  EXPECT_THROW(divide_by(nullptr, 8, DataType::f32, 2), InvalidArgument);
  EXPECT_NO_THROW(divide_by(nullptr, 0, DataType::f32, 2));
  EXPECT_THROW(divide_by(f, 8, static_cast<DataType>(200), 2), InvalidArgument);

  // Partial overlap is refused; exact aliasing is fine.
  EXPECT_THROW(reduce(f + 1, f, f + 4, 4, DataType::f32, ReduceOp::sum), InvalidArgument);
  EXPECT_THROW(reduce(f, f + 4, f + 2, 4, DataType::f32, ReduceOp::sum), InvalidArgument);
  EXPECT_NO_THROW(reduce(f, f, f + 4, 4, DataType::f32, ReduceOp::sum));

  try {
    reduce(x, x, y, 1, DataType::i32, ReduceOp::avg);
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(e.message().find("i32"), std::string::npos) << e.what();
  }
}

TEST(ReduceDispatch, InstructionSetCanBeChosenAndRestored) {
  const std::string startup(instruction_set());
  EXPECT_TRUE(startup == "generic" || startup == "avx2" || startup == "avx512") << startup;
  EXPECT_FALSE(set_instruction_set("sse9"));
  EXPECT_EQ(instruction_set(), startup);
  ASSERT_TRUE(set_instruction_set("generic"));
  EXPECT_EQ(instruction_set(), "generic");
  // The start-up choice is the best available unless ARCOLL_KERNEL_ISA says otherwise.
  if (std::getenv("ARCOLL_KERNEL_ISA") == nullptr) {
    for (const char* better : {"avx2", "avx512"}) {
      if (set_instruction_set(better)) {
        EXPECT_TRUE(startup == "avx512" || startup == better) << better;
      }
    }
  }
  ASSERT_TRUE(set_instruction_set("auto"));
  EXPECT_EQ(instruction_set(), startup);
}

// ARCOLL_KERNEL_ISA is read when the kernels are first used, so each check runs in a fresh
// process (the "threadsafe" death-test style re-executes this binary for the one test).
TEST(ReduceDispatch, EnvironmentVariableForcesOrWarns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("ARCOLL_KERNEL_ISA", "generic", 1);
        std::exit(instruction_set() == "generic" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("ARCOLL_KERNEL_ISA", "sse9", 1);
        const std::string_view chosen = instruction_set();
        std::exit(chosen == "generic" || chosen == "avx2" || chosen == "avx512" ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "ARCOLL_KERNEL_ISA=sse9");
}

// ---------------------------------------------------------------------------------------------
// Scalar conversions.

TEST(HalfConversion, EveryPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = half_to_float(h);
    if (is_nan_bits(h, kHalf)) {
      EXPECT_TRUE(std::isnan(f)) << describe(kHalf, h);
      EXPECT_TRUE(is_nan_bits(float_to_half(f), kHalf)) << describe(kHalf, h);
      continue;
    }
    const long double expected = decode_float(h, kHalf);
    ASSERT_EQ(static_cast<long double>(f), expected) << describe(kHalf, h);
    ASSERT_EQ(std::signbit(f), std::signbit(expected)) << describe(kHalf, h);
    ASSERT_EQ(float_to_half(f), h) << describe(kHalf, h);
  }
}

// Floats around every half rounding boundary: every exponent, every 10-bit upper significand,
// and low bits below / at / above the tie (ties of subnormal results, with more dropped bits,
// come from the upper significands ending in zeros). Plus random floats.
std::vector<float> floats_around_half_boundaries() {
  std::vector<float> floats;
  const std::uint32_t lows[] = {0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff};
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (std::uint32_t high = 0; high < 1024; ++high) {
        for (std::uint32_t low : lows) {
          const std::uint32_t bits = (sign << 31) | (exponent << 23) | (high << 13) | low;
          float f;
          std::memcpy(&f, &bits, 4);
          floats.push_back(f);
        }
      }
    }
  }
  std::mt19937 rng(2024);
  for (int i = 0; i < 1000000; ++i) {
    const std::uint32_t bits = static_cast<std::uint32_t>(rng());
    float f;
    std::memcpy(&f, &bits, 4);
    floats.push_back(f);
  }
  return floats;
}

#if defined(__FLT16_MANT_DIG__)
TEST(HalfConversion, FloatToHalfMatchesFloat16) {
  for (float f : floats_around_half_boundaries()) {
    const auto reference = static_cast<_Float16>(f);
    std::uint16_t expected;
    std::memcpy(&expected, &reference, 2);
    const std::uint16_t got = float_to_half(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan_bits(got, kHalf)) << f;
    } else {
      ASSERT_EQ(got, expected) << std::hexfloat << f;
    }
  }
}
#endif

TEST(HalfConversion, FloatToHalfMatchesRoundTo) {
  for (float f : floats_around_half_boundaries()) {
    const std::uint16_t got = float_to_half(f);
    ASSERT_TRUE(float_matches(kHalf, got, round_to(f, kHalf)))
        << std::hexfloat << f << " gave " << describe(kHalf, got);
  }
  // Named cases, their expected values derived from the format rather than written out.
  const float max_half = static_cast<float>(std::ldexp(2.0L - std::ldexp(1.0L, -10), 15));
  const float half_ulp_at_max = std::ldexp(1.0f, 15 - 11);
  EXPECT_EQ(half_to_float(float_to_half(max_half)), max_half);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(max_half + half_ulp_at_max))));
  EXPECT_EQ(half_to_float(float_to_half(std::nextafter(max_half + half_ulp_at_max, 0.0f))),
            max_half);
  const float min_subnormal = std::ldexp(1.0f, -24);
  EXPECT_EQ(half_to_float(float_to_half(min_subnormal)), min_subnormal);
  EXPECT_EQ(half_to_float(float_to_half(min_subnormal / 2)), 0.0f);  // tie to even: zero
  EXPECT_EQ(half_to_float(float_to_half(min_subnormal * 1.5f)), 2 * min_subnormal);  // tie: even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + std::ldexp(1.0f, -11))), 1.0f);       // tie: even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11))),
            1.0f + std::ldexp(1.0f, -9));  // tie: even
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(
      std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::signaling_NaN()))));
}

TEST(Bf16Conversion, EveryPatternRoundTrips) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float f = bf16_to_float(b);
    if (is_nan_bits(b, kBf16)) {
      EXPECT_TRUE(std::isnan(f)) << describe(kBf16, b);
      EXPECT_TRUE(is_nan_bits(float_to_bf16(f), kBf16)) << describe(kBf16, b);
      continue;
    }
    const long double expected = decode_float(b, kBf16);
    ASSERT_EQ(static_cast<long double>(f), expected) << describe(kBf16, b);
    ASSERT_EQ(std::signbit(f), std::signbit(expected)) << describe(kBf16, b);
    ASSERT_EQ(float_to_bf16(f), b) << describe(kBf16, b);
  }
}

TEST(Bf16Conversion, RoundsToNearestEven) {
  const std::uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::mt19937 rng(7);
  auto check = [](std::uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    const std::uint16_t got = float_to_bf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan_bits(got, kBf16)) << std::hex << bits;
      // Quiet: the top significand bit is set.
      ASSERT_NE(got & 0x0040, 0) << std::hex << bits;
      return;
    }
    ASSERT_TRUE(float_matches(kBf16, got, round_to(f, kBf16)))
        << std::hexfloat << f << " gave " << describe(kBf16, got);
  };
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (std::uint32_t high = 0; high < 128; ++high) {
        for (std::uint32_t low : lows) check((sign << 31) | (exponent << 23) | (high << 16) | low);
        check((sign << 31) | (exponent << 23) | (high << 16) | (rng() & 0xffff));
      }
    }
  }
  for (int i = 0; i < 1000000; ++i) check(static_cast<std::uint32_t>(rng()));
}

}  // namespace
}  // namespace arcoll::kernels
