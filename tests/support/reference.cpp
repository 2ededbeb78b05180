#include "tests/support/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace arcoll::testing {
namespace {

// The checks' loops run per element over every rank's input: they choose the element type
// once, so that the accesses below inline into them (a switch and a call per element and
// rank were most of a correctness test's time outside the library).
template <DataType T>
using Type = std::integral_constant<DataType, T>;

template <class F>
decltype(auto) with_type(DataType type, F&& f) {
  switch (type) {
    case DataType::f32:
      return f(Type<DataType::f32>{});
    case DataType::f64:
      return f(Type<DataType::f64>{});
    case DataType::f16:
      return f(Type<DataType::f16>{});
    case DataType::bf16:
      return f(Type<DataType::bf16>{});
    case DataType::i8:
      return f(Type<DataType::i8>{});
    case DataType::u8:
      return f(Type<DataType::u8>{});
    case DataType::i32:
      return f(Type<DataType::i32>{});
    case DataType::i64:
      break;
  }
  return f(Type<DataType::i64>{});
}

// How an element of type T is held.
template <DataType T>
using Stored = std::conditional_t<
    T == DataType::f32, float,
    std::conditional_t<
        T == DataType::f64, double,
        std::conditional_t<
            T == DataType::f16 || T == DataType::bf16, std::uint16_t,
            std::conditional_t<
                T == DataType::i8, std::int8_t,
                std::conditional_t<
                    T == DataType::u8, std::uint8_t,
                    std::conditional_t<T == DataType::i32, std::int32_t, std::int64_t>>>>>>;

template <DataType T>
Stored<T> held(const void* buffer, std::size_t i) {
  Stored<T> v;
  std::memcpy(&v, static_cast<const unsigned char*>(buffer) + i * sizeof v, sizeof v);
  return v;
}

template <DataType T>
double load_as(const void* buffer, std::size_t i) {
  const Stored<T> v = held<T>(buffer, i);
  if constexpr (T == DataType::f16) return half_to_float(v);
  if constexpr (T == DataType::bf16) return bf16_to_float(v);
  return static_cast<double>(v);
}

template <DataType T>
void store_as(void* buffer, std::size_t i, double value) {
  Stored<T> v;
  if constexpr (T == DataType::f16)
    v = float_to_half(static_cast<float>(value));
  else if constexpr (T == DataType::bf16)
    v = float_to_bf16(static_cast<float>(value));
  else if constexpr (std::is_floating_point_v<Stored<T>> || T == DataType::i64)
    v = static_cast<Stored<T>>(value);
  else  // integer results are exact in double for our inputs; narrowing is modular (C++20)
    v = static_cast<Stored<T>>(static_cast<std::int64_t>(value));
  std::memcpy(static_cast<unsigned char*>(buffer) + i * sizeof v, &v, sizeof v);
}

template <DataType T>
double tolerance(double reference) {
  const double scale = std::max(1.0, std::fabs(reference));
  if constexpr (T == DataType::f64) return 4 * std::numeric_limits<double>::epsilon() * scale;
  if constexpr (T == DataType::f32) return 4 * std::numeric_limits<float>::epsilon() * scale;
  if constexpr (T == DataType::f16) return 2 * 0x1p-10 * scale;
  if constexpr (T == DataType::bf16) return 2 * 0x1p-7 * scale;
  return 0;
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

template <DataType T>
double input_as(ReduceOp op, int rank, std::size_t i, std::size_t salt) {
  const std::size_t h =
      (i * 2654435761u + static_cast<std::size_t>(rank) * 40503u + salt * 97u) >> 3;
  constexpr bool is_unsigned = T == DataType::u8;
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

template <DataType T>
double expected_as(ReduceOp op, int world, std::size_t i, std::size_t salt) {
  double acc = input_as<T>(op, 0, i, salt);
  for (int r = 1; r < world; ++r) acc = combine(op, acc, input_as<T>(op, r, i, salt));
  if (op == ReduceOp::avg) return acc / world;
  // Round through the type: integer wrap, float rounding.
  unsigned char element[sizeof(Stored<T>)];
  store_as<T>(element, 0, acc);
  return load_as<T>(element, 0);
}

}  // namespace

double load(const void* buffer, DataType type, std::size_t i) {
  return with_type(type, [&](auto t) { return load_as<t()>(buffer, i); });
}

void store(void* buffer, DataType type, std::size_t i, double value) {
  with_type(type, [&](auto t) { store_as<t()>(buffer, i, value); });
}

std::vector<unsigned char> make_input(DataType type, ReduceOp op, int rank, std::size_t count,
                                      std::size_t salt) {
  std::vector<unsigned char> buffer(count * size_of(type));
  write_input(buffer.data(), type, op, rank, count, salt);
  return buffer;
}

void write_input(void* buffer, DataType type, ReduceOp op, int rank, std::size_t count,
                 std::size_t salt) {
  with_type(type, [&](auto t) {
    for (std::size_t i = 0; i < count; ++i)
      store_as<t()>(buffer, i, input_as<t()>(op, rank, i, salt));
  });
}

std::size_t count_not_input(const void* buffer, DataType type, ReduceOp op, int rank,
                            std::size_t count, std::size_t salt) {
  return with_type(type, [&](auto t) {
    std::size_t differing = 0;
    Stored<t()> input;
    for (std::size_t i = 0; i < count; ++i) {
      store_as<t()>(&input, 0, input_as<t()>(op, rank, i, salt));
      // Compared as bits: a changed element is changed even where it compares equal (-0, NaN).
      if (std::memcmp(&input, static_cast<const unsigned char*>(buffer) + i * sizeof input,
                      sizeof input) != 0)
        ++differing;
    }
    return differing;
  });
}

double expected(DataType type, ReduceOp op, int world, std::size_t i, std::size_t salt) {
  return with_type(type, [&](auto t) { return expected_as<t()>(op, world, i, salt); });
}

std::size_t count_wrong(const void* buffer, DataType type, ReduceOp op, int world,
                        std::size_t count, std::size_t salt, std::size_t first_index) {
  return with_type(type, [&](auto t) {
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double want = expected_as<t()>(op, world, first_index + i, salt);
      const double got = load_as<t()>(buffer, i);
      if (!(std::fabs(got - want) <= tolerance<t()>(want))) ++wrong;
    }
    return wrong;
  });
}

}  // namespace arcoll::testing
