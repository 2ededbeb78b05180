#include "tests/support/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace arcoll::testing {
namespace {

template <class T>
T wrap_to(double value) {
  // Integer results are exact in double for our inputs; narrowing is modular since C++20.
  return static_cast<T>(static_cast<std::int64_t>(value));
}

double tolerance(DataType type, double reference) {
  const double scale = std::max(1.0, std::fabs(reference));
  switch (type) {
    case DataType::f64:
      return 4 * std::numeric_limits<double>::epsilon() * scale;
    case DataType::f32:
      return 4 * std::numeric_limits<float>::epsilon() * scale;
    case DataType::f16:
      return 2 * 0x1p-10 * scale;
    case DataType::bf16:
      return 2 * 0x1p-7 * scale;
    default:
      return 0;
  }
}

// `op` on two values, the reference's own: the library's scalar apply() is code under test,
// and an out-of-line call, instrumented under the sanitizers, was a sixth of a shared-buffer
// test's time.
double combine(ReduceOp op, double a, double b) {
  if (op == ReduceOp::prod) return a * b;
  if (op == ReduceOp::min) return b < a ? b : a;
  if (op == ReduceOp::max) return a < b ? b : a;
  return a + b;  // sum, and avg before its division
}

// Element i's bytes, widened: compared whole (a copy of a fixed size is inlined; a call to
// memcmp goes through AddressSanitizer's interceptor, per element).
std::uint64_t element_bits(const void* buffer, DataType type, std::size_t i) {
  const auto* p = static_cast<const unsigned char*>(buffer) + i * size_of(type);
  std::uint64_t bits = 0;
  switch (size_of(type)) {
    case 1:
      std::memcpy(&bits, p, 1);
      break;
    case 2:
      std::memcpy(&bits, p, 2);
      break;
    case 4:
      std::memcpy(&bits, p, 4);
      break;
    default:
      std::memcpy(&bits, p, 8);
  }
  return bits;
}

std::uint64_t input_bits(DataType type, ReduceOp op, int rank, std::size_t i, std::size_t salt);

}  // namespace

double load(const void* buffer, DataType type, std::size_t i) {
  const auto* p = static_cast<const unsigned char*>(buffer);
  switch (type) {
    case DataType::f32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DataType::f64: {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case DataType::f16: {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return half_to_float(v);
    }
    case DataType::bf16: {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      return bf16_to_float(v);
    }
    case DataType::i8:
      return static_cast<std::int8_t>(p[i]);
    case DataType::u8:
      return p[i];
    case DataType::i32: {
      std::int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DataType::i64: {
      std::int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return static_cast<double>(v);
    }
  }
  return 0;
}

void store(void* buffer, DataType type, std::size_t i, double value) {
  auto* p = static_cast<unsigned char*>(buffer);
  switch (type) {
    case DataType::f32: {
      float v = static_cast<float>(value);
      std::memcpy(p + 4 * i, &v, 4);
      return;
    }
    case DataType::f64:
      std::memcpy(p + 8 * i, &value, 8);
      return;
    case DataType::f16: {
      auto v = float_to_half(static_cast<float>(value));
      std::memcpy(p + 2 * i, &v, 2);
      return;
    }
    case DataType::bf16: {
      auto v = float_to_bf16(static_cast<float>(value));
      std::memcpy(p + 2 * i, &v, 2);
      return;
    }
    case DataType::i8:
      p[i] = static_cast<unsigned char>(wrap_to<std::int8_t>(value));
      return;
    case DataType::u8:
      p[i] = wrap_to<std::uint8_t>(value);
      return;
    case DataType::i32: {
      auto v = wrap_to<std::int32_t>(value);
      std::memcpy(p + 4 * i, &v, 4);
      return;
    }
    case DataType::i64: {
      auto v = static_cast<std::int64_t>(value);
      std::memcpy(p + 8 * i, &v, 8);
      return;
    }
  }
}

double input_value(DataType type, ReduceOp op, int rank, std::size_t i, std::size_t salt) {
  const std::size_t h =
      (i * 2654435761u + static_cast<std::size_t>(rank) * 40503u + salt * 97u) >> 3;
  const bool is_unsigned = type == DataType::u8;
  switch (op) {
    case ReduceOp::prod:
      if (h % 5 == 0) return 2;
      if (h % 7 == 0 && !is_unsigned) return -1;
      return 1;
    case ReduceOp::min:
    case ReduceOp::max:
      return is_unsigned ? static_cast<double>(h % 100) : static_cast<double>(h % 101) - 50;
    case ReduceOp::sum:
    case ReduceOp::avg:
      return is_unsigned ? static_cast<double>(h % 9) : static_cast<double>(h % 9) - 4;
  }
  return 0;
}

namespace {
std::uint64_t input_bits(DataType type, ReduceOp op, int rank, std::size_t i, std::size_t salt) {
  unsigned char element[8] = {};
  store(element, type, 0, input_value(type, op, rank, i, salt));
  return element_bits(element, type, 0);
}
}  // namespace

std::vector<unsigned char> make_input(DataType type, ReduceOp op, int rank, std::size_t count,
                                      std::size_t salt) {
  std::vector<unsigned char> buffer(count * size_of(type));
  write_input(buffer.data(), type, op, rank, count, salt);
  return buffer;
}

void write_input(void* buffer, DataType type, ReduceOp op, int rank, std::size_t count,
                 std::size_t salt) {
  for (std::size_t i = 0; i < count; ++i)
    store(buffer, type, i, input_value(type, op, rank, i, salt));
}

std::size_t count_not_input(const void* buffer, DataType type, ReduceOp op, int rank,
                            std::size_t count, std::size_t salt) {
  std::size_t differing = 0;
  for (std::size_t i = 0; i < count; ++i)
    if (element_bits(buffer, type, i) != input_bits(type, op, rank, i, salt)) ++differing;
  return differing;
}

double expected(DataType type, ReduceOp op, int world, std::size_t i, std::size_t salt) {
  double acc = input_value(type, op, 0, i, salt);
  for (int r = 1; r < world; ++r) {
    acc = combine(op, acc, input_value(type, op, r, i, salt));
  }
  if (op == ReduceOp::avg) return acc / world;
  // Round through the type: integer wrap, float rounding.
  unsigned char tmp[8];
  store(tmp, type, 0, acc);
  return load(tmp, type, 0);
}

std::size_t count_wrong(const void* buffer, DataType type, ReduceOp op, int world,
                        std::size_t count, std::size_t salt, std::size_t first_index) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double want = expected(type, op, world, first_index + i, salt);
    const double got = load(buffer, type, i);
    if (!(std::fabs(got - want) <= tolerance(type, want))) ++wrong;
  }
  return wrong;
}

}  // namespace arcoll::testing
