// Deterministic inputs for every rank and the expected result of an allreduce over them,
// computed independently on each rank in double precision (floating types) or modular 64-bit
// arithmetic (integer types, which wrap like the library does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "arcoll/types.hpp"

namespace arbench {

// Storage of the 16-bit floating types, which arcoll passes around as raw bits.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

// Calls f.template operator()<T>() with T the C++ storage type of `type`, so that one generic
// lambda serves every element type: with_type(type, [&]<typename T>() { ... }).
template <typename F>
decltype(auto) with_type(arcoll::DataType type, F&& f) {
  using arcoll::DataType;
  switch (type) {
    case DataType::f32:
      return f.template operator()<float>();
    case DataType::f64:
      return f.template operator()<double>();
    case DataType::f16:
      return f.template operator()<Half>();
    case DataType::bf16:
      return f.template operator()<BFloat16>();
    case DataType::i8:
      return f.template operator()<std::int8_t>();
    case DataType::u8:
      return f.template operator()<std::uint8_t>();
    case DataType::i32:
      return f.template operator()<std::int32_t>();
    case DataType::i64:
      return f.template operator()<std::int64_t>();
  }
  throw std::invalid_argument("arbench: unknown data type");
}

// One rank's input and the expected reduction over every rank's input, for one type and
// operator. Element i of either is element i % kPeriod of the pattern; the calls below start
// at pattern element `first` (block r of a reduce-scatter starts at r * count).
//
// Values are chosen so that results are exact whatever the reduction order: small integers
// for sum and avg (so that every partial sum is representable), {1, 2, -1} for prod on
// floating types, arbitrary values for min and max, and full-range values for integer sum and
// prod (which wrap; the reference wraps the same way). avg rounds once more, so its floating
// results may be two units in the last place of the type times max(1, |expected|) away from the
// reference; everything else is expected exactly (bf16 sums over more than 256 ranks, which
// cannot be exact, get one unit per addition).
//
// Both repeat with a period of kPeriod elements, a prime: a block of data that lands at a
// power-of-two offset from where it belongs is always noticed, and the check is a memcmp per
// period in the common case.
//
// With a 16-bit wire (mixed precision, `wire` f16 or bf16) f32 inputs other than for prod are
// reals in [-1, 1) instead, which the wire rounds: a result is then correct within
// (2p + 1) u S of the exact one, where u is the wire's unit roundoff, S the sum of the
// magnitudes of the p inputs (divided by p for avg), and 2p + 1 bounds the roundings of a
// partial result on its way (p - 1 hops of reduce-scatter, p - 1 of all-gather, the final
// rounding and the fold of non-power-of-two worlds).
class Pattern {
 public:
  static constexpr std::size_t kPeriod = 4093;

  Pattern(arcoll::DataType type, arcoll::ReduceOp op, int rank, int world_size,
          arcoll::DataType wire = arcoll::DataType::f32);

  // Writes `count` of this rank's input elements, from element `first`, to `buffer`.
  void fill_input(void* buffer, std::size_t count, std::size_t first = 0) const;
  // Overwrites `count` elements with a value that no correct result equals everywhere, so that
  // an allreduce which writes nothing is caught.
  void poison(void* buffer, std::size_t count) const;
  // Number of the `count` elements of `result` that differ from the expected reduction's,
  // from element `first`.
  std::int64_t count_wrong(const void* result, std::size_t count, std::size_t first = 0) const;
  // Number of the `count` elements of `result` that differ from this rank's input from element
  // `first`: what a collective that moves data (all-gather, all-to-all...) must deliver.
  std::int64_t count_unlike_input(const void* result, std::size_t count,
                                  std::size_t first = 0) const;

  // Whether the inputs are the wire's reals (see above).
  bool rounded_by_wire() const { return !magnitude_.empty(); }
  // The largest |result - exact| and the largest |result - exact| / S over `count` elements.
  struct Errors {
    double max_abs = 0;
    double max_rel = 0;
  };
  Errors errors(const void* result, std::size_t count) const;

  arcoll::DataType type() const { return type_; }
  arcoll::ReduceOp op() const { return op_; }

 private:
  void fill_wire_reals(int rank, int world_size, double unit_roundoff);
  // Calls piece(i, j, n) over `count` elements from pattern element `first`: n elements at i
  // are pattern elements j .. j+n-1.
  template <class Piece>
  static void by_period(std::size_t count, std::size_t first, Piece&& piece);

  arcoll::DataType type_;
  arcoll::ReduceOp op_;
  std::size_t element_size_;
  std::vector<std::byte> input_;        // kPeriod elements of this rank's input
  std::vector<std::byte> expected_;     // kPeriod elements of the reference, rounded to the type
  std::vector<double> expected_value_;  // the same as doubles (floating types only)
  std::vector<double> tolerance_;       // allowed |result - expected| (floating types only)
  std::vector<double> exact_;           // the exact results (rounded by the wire only)
  std::vector<double> magnitude_;       // S of each element (rounded by the wire only)
};

}  // namespace arbench
