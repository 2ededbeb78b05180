#include "arbench/reference.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace arbench {

using arcoll::DataType;
using arcoll::ReduceOp;

namespace {

// What the check needs to know about a floating element type: conversions, the largest
// magnitude up to which every integer is representable, and the unit roundoff.
template <typename T>
struct Floating;

template <>
struct Floating<float> {
  static constexpr std::int64_t kExactLimit = std::int64_t{1} << 24;
  static constexpr double kEpsilon = 0x1p-23;
  static float from_double(double v) { return static_cast<float>(v); }
  static double to_double(float v) { return v; }
};

template <>
struct Floating<double> {
  static constexpr std::int64_t kExactLimit = std::int64_t{1} << 53;
  static constexpr double kEpsilon = 0x1p-52;
  static double from_double(double v) { return v; }
  static double to_double(double v) { return v; }
};

template <>
struct Floating<Half> {
  static constexpr std::int64_t kExactLimit = 2048;
  static constexpr double kEpsilon = 0x1p-10;
  static Half from_double(double v) { return Half{arcoll::float_to_half(static_cast<float>(v))}; }
  static double to_double(Half v) { return arcoll::half_to_float(v.bits); }
};

template <>
struct Floating<BFloat16> {
  static constexpr std::int64_t kExactLimit = 256;
  static constexpr double kEpsilon = 0x1p-7;
  static BFloat16 from_double(double v) {
    return BFloat16{arcoll::float_to_bf16(static_cast<float>(v))};
  }
  static double to_double(BFloat16 v) { return arcoll::bf16_to_float(v.bits); }
};

template <typename T>
constexpr bool kIsFloating = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                             std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
T load(const std::byte* base, std::size_t index) {
  T value;
  std::memcpy(&value, base + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void store(std::byte* base, std::size_t index, T value) {
  std::memcpy(base + index * sizeof(T), &value, sizeof(T));
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t element_hash(int rank, std::size_t index, DataType type, ReduceOp op) {
  const std::uint64_t kind =
      (static_cast<std::uint64_t>(type) << 8) | static_cast<std::uint64_t>(op);
  return mix(mix(mix(kind) ^ static_cast<std::uint64_t>(rank)) ^ index);
}

// Largest magnitude of a floating sum or avg input: small enough that every partial sum is an
// exactly representable integer (up to kExactLimit ranks).
template <typename T>
std::int64_t sum_magnitude(int world_size) {
  return std::clamp<std::int64_t>(Floating<T>::kExactLimit / world_size, 1, 8);
}

// The value rank `rank` contributes at one index, as an integer that converts exactly to T.
template <typename T>
std::int64_t input_seed(ReduceOp op, std::uint64_t hash, int world_size) {
  if constexpr (kIsFloating<T>) {
    constexpr std::int64_t limit = Floating<T>::kExactLimit;
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: {
        const std::int64_t m = sum_magnitude<T>(world_size);
        return static_cast<std::int64_t>(hash % static_cast<std::uint64_t>(2 * m + 1)) - m;
      }
      case ReduceOp::prod:
        switch (hash % 8) {  // powers of two: products are exact (or overflow to infinity)
          case 0:
            return 2;
          case 1:
            return -1;
          default:
            return 1;
        }
      case ReduceOp::min:
      case ReduceOp::max: {
        const std::int64_t m = std::min<std::int64_t>(limit / 2, std::int64_t{1} << 20);
        return static_cast<std::int64_t>(hash % static_cast<std::uint64_t>(2 * m + 1)) - m;
      }
    }
    return 0;
  } else {
    (void)world_size;
    // Full-range values: sums and products wrap, and so does the reference. Odd factors keep
    // products from collapsing to zero.
    return static_cast<std::int64_t>(op == ReduceOp::prod ? (hash | 1u) : hash);
  }
}

template <typename T>
T from_seed(std::int64_t seed) {
  if constexpr (kIsFloating<T>)
    return Floating<T>::from_double(static_cast<double>(seed));
  else
    return static_cast<T>(seed);  // modular since C++20
}

// Exact result of `op` over the seeds, in double (exact for the values input_seed picks).
double reduce_floating(ReduceOp op, const std::vector<std::int64_t>& seeds) {
  double acc = static_cast<double>(seeds[0]);
  for (std::size_t r = 1; r < seeds.size(); ++r) {
    acc = arcoll::apply(op, acc, static_cast<double>(seeds[r]));
  }
  if (op == ReduceOp::avg) acc /= static_cast<double>(seeds.size());
  return acc;
}

// Result of `op` over the seeds converted to T, with wrapping sum and product.
template <typename T>
T reduce_integer(ReduceOp op, const std::vector<std::int64_t>& seeds) {
  if (op == ReduceOp::min || op == ReduceOp::max) {
    T acc = static_cast<T>(seeds[0]);
    for (std::size_t r = 1; r < seeds.size(); ++r) {
      const T v = static_cast<T>(seeds[r]);
      acc = op == ReduceOp::min ? std::min(acc, v) : std::max(acc, v);
    }
    return acc;
  }
  // Arithmetic modulo 2^64 narrowed to T equals arithmetic modulo 2^bits(T).
  auto acc = static_cast<std::uint64_t>(seeds[0]);
  for (std::size_t r = 1; r < seeds.size(); ++r) {
    const auto v = static_cast<std::uint64_t>(seeds[r]);
    acc = op == ReduceOp::prod ? acc * v : acc + v;
  }
  return static_cast<T>(acc);
}

// How far a correct floating result may be from the rounded reference. Sums, products, minima
// and maxima of the chosen inputs are exact in any order; avg rounds once more (the division,
// and for f16/bf16 the way back from f32), hence two units in the last place. Sums over more
// ranks than the type counts exactly (bf16 beyond 256 ranks) accumulate one rounding per
// addition.
template <typename T>
double tolerance(ReduceOp op, double exact, int world_size) {
  constexpr double eps = Floating<T>::kEpsilon;
  if (op == ReduceOp::avg) return 2 * eps * std::max(1.0, std::fabs(exact));
  if (op == ReduceOp::sum) {
    const double bound = static_cast<double>(sum_magnitude<T>(world_size)) * world_size;
    if (bound > static_cast<double>(Floating<T>::kExactLimit)) return world_size * eps * bound;
  }
  return 0;
}

}  // namespace

Pattern::Pattern(DataType type, ReduceOp op, int rank, int world_size, DataType wire)
    : type_(type), op_(op), element_size_(arcoll::size_of(type)) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("arbench: rank " + std::to_string(rank) + " outside a world of " +
                                std::to_string(world_size));
  if (!arcoll::is_supported(type, op))
    throw std::invalid_argument("arbench: " + std::string(arcoll::to_string(op)) +
                                " is not defined for " + std::string(arcoll::to_string(type)));
  input_.resize(kPeriod * element_size_);
  expected_.resize(kPeriod * element_size_);
  if (wire != DataType::f32 && type == DataType::f32 && op != ReduceOp::prod) {
    fill_wire_reals(rank, world_size, wire == DataType::f16 ? 0x1p-11 : 0x1p-8);
    return;
  }
  with_type(type, [&]<typename T>() {
    std::vector<std::int64_t> seeds(static_cast<std::size_t>(world_size));
    if constexpr (kIsFloating<T>) {
      expected_value_.resize(kPeriod);
      tolerance_.resize(kPeriod);
    }
    for (std::size_t j = 0; j < kPeriod; ++j) {
      for (int r = 0; r < world_size; ++r)
        seeds[static_cast<std::size_t>(r)] =
            input_seed<T>(op, element_hash(r, j, type, op), world_size);
      store(input_.data(), j, from_seed<T>(seeds[static_cast<std::size_t>(rank)]));
      if constexpr (kIsFloating<T>) {
        const double exact = reduce_floating(op, seeds);
        const T rounded = Floating<T>::from_double(exact);
        store(expected_.data(), j, rounded);
        expected_value_[j] = Floating<T>::to_double(rounded);
        tolerance_[j] = tolerance<T>(op, exact, world_size);
      } else {
        store(expected_.data(), j, reduce_integer<T>(op, seeds));
      }
    }
  });
}

void Pattern::fill_wire_reals(int rank, int world_size, double unit_roundoff) {
  expected_value_.resize(kPeriod);
  tolerance_.resize(kPeriod);
  exact_.resize(kPeriod);
  magnitude_.resize(kPeriod);
  const double p = world_size;
  for (std::size_t j = 0; j < kPeriod; ++j) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < world_size; ++r) {
      // 20 significant bits: exact in f32, rounded by a 16-bit wire.
      const std::uint64_t hash = element_hash(r, j, type_, op_);
      const double v = (static_cast<double>(hash % (1u << 20)) - (1u << 19)) / (1u << 19);
      if (r == rank) store(input_.data(), j, static_cast<float>(v));
      exact = r == 0 ? v : arcoll::apply(op_, exact, v);
      magnitude += std::fabs(v);
    }
    if (op_ == ReduceOp::avg) {
      exact /= p;
      magnitude /= p;
    }
    exact_[j] = exact;
    magnitude_[j] = magnitude;
    store(expected_.data(), j, static_cast<float>(exact));
    expected_value_[j] = static_cast<float>(exact);
    tolerance_[j] = (2 * p + 1) * unit_roundoff * magnitude;
  }
}

Pattern::Errors Pattern::errors(const void* result, std::size_t count) const {
  Errors e;
  const auto* got = static_cast<const float*>(result);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t j = i % kPeriod;
    const double error = std::fabs(static_cast<double>(got[i]) - exact_[j]);
    e.max_abs = std::max(e.max_abs, error);
    e.max_rel = std::max(e.max_rel, error / magnitude_[j]);
  }
  return e;
}

template <class Piece>
void Pattern::by_period(std::size_t count, std::size_t first, Piece&& piece) {
  for (std::size_t i = 0; i < count;) {
    const std::size_t j = (first + i) % kPeriod;
    const std::size_t n = std::min(kPeriod - j, count - i);
    piece(i, j, n);
    i += n;
  }
}

void Pattern::fill_input(void* buffer, std::size_t count, std::size_t first) const {
  auto* out = static_cast<std::byte*>(buffer);
  by_period(count, first, [&](std::size_t i, std::size_t j, std::size_t n) {
    std::memcpy(out + i * element_size_, input_.data() + j * element_size_, n * element_size_);
  });
}

std::int64_t Pattern::count_unlike_input(const void* result, std::size_t count,
                                         std::size_t first) const {
  const auto* got = static_cast<const std::byte*>(result);
  std::int64_t wrong = 0;
  by_period(count, first, [&](std::size_t i, std::size_t j, std::size_t n) {
    const std::byte* block = got + i * element_size_;
    const std::byte* want = input_.data() + j * element_size_;
    if (std::memcmp(block, want, n * element_size_) == 0) return;
    for (std::size_t k = 0; k < n; ++k)
      wrong += std::memcmp(block + k * element_size_, want + k * element_size_, element_size_) != 0;
  });
  return wrong;
}

void Pattern::poison(void* buffer, std::size_t count) const {
  // All ones: NaN for every floating type, -1 or the maximum for integers (which the varied
  // expected integers cannot all equal).
  std::memset(buffer, 0xff, count * element_size_);
}

std::int64_t Pattern::count_wrong(const void* result, std::size_t count, std::size_t first) const {
  const auto* got = static_cast<const std::byte*>(result);
  std::int64_t wrong = 0;
  by_period(count, first, [&](std::size_t i, std::size_t j0, std::size_t n) {
    const std::byte* block = got + i * element_size_;
    if (std::memcmp(block, expected_.data() + j0 * element_size_, n * element_size_) == 0) return;
    wrong += with_type(type_, [&]<typename T>() {
      std::int64_t differing = 0;
      for (std::size_t k = 0; k < n; ++k) {
        const std::size_t j = j0 + k;
        const T value = load<T>(block, k);
        if constexpr (kIsFloating<T>) {
          const double v = Floating<T>::to_double(value);
          const double want = expected_value_[j];
          if (v == want) continue;
          if (!std::isfinite(want) || !(std::fabs(v - want) <= tolerance_[j])) ++differing;
        } else {
          if (value != load<T>(expected_.data(), j)) ++differing;
        }
      }
      return differing;
    });
  });
  return wrong;
}

}  // namespace arbench
