// Element types and reduction operators shared by the whole library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace arcoll {

enum class DataType : std::uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64 };

// avg divides the sum by the world size; it is defined for floating types only
// (integer avg would silently truncate, so it is rejected with InvalidArgument).
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg };

inline constexpr DataType kAllDataTypes[] = {DataType::f32,  DataType::f64, DataType::f16,
                                             DataType::bf16, DataType::i8,  DataType::u8,
                                             DataType::i32,  DataType::i64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min,
                                             ReduceOp::max, ReduceOp::avg};

std::size_t size_of(DataType type);
bool is_floating(DataType type);
std::string_view to_string(DataType type);
std::string_view to_string(ReduceOp op);
// Accepts our names (f32, bf16, ...) and nccl-tests' (float, half, bfloat16, int32, ...).
std::optional<DataType> parse_data_type(std::string_view name);
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

// True when `op` can be applied to `type`; see ReduceOp::avg.
bool is_supported(DataType type, ReduceOp op);

// f16 and bf16 elements are carried as their bits; these convert them (round to nearest
// even; NaN stays NaN; f16 overflow gives infinity).
float half_to_float(std::uint16_t bits);
std::uint16_t float_to_half(float value);
float bf16_to_float(std::uint16_t bits);
std::uint16_t float_to_bf16(float value);

// What `op` means for two values, in double: the reference that results are checked
// against (avg accumulates as sum; divide by the world size at the end).
double apply(ReduceOp op, double accumulated, double value);

// Library version and the git commit it was built from ("unknown" outside a checkout).
std::string_view version();
std::string_view git_commit();

}  // namespace arcoll
