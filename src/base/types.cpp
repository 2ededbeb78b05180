#include "arcoll/types.hpp"

#include <algorithm>
#include <cctype>
#include <string>

#include "build_info.hpp"
#include "git_commit.hpp"

namespace arcoll {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::size_t size_of(DataType type) {
  switch (type) {
    case DataType::f64:
    case DataType::i64:
      return 8;
    case DataType::f32:
    case DataType::i32:
      return 4;
    case DataType::f16:
    case DataType::bf16:
      return 2;
    case DataType::i8:
    case DataType::u8:
      return 1;
  }
  return 0;
}

bool is_floating(DataType type) {
  return type == DataType::f32 || type == DataType::f64 || type == DataType::f16 ||
         type == DataType::bf16;
}

std::string_view to_string(DataType type) {
  switch (type) {
    case DataType::f32:
      return "f32";
    case DataType::f64:
      return "f64";
    case DataType::f16:
      return "f16";
    case DataType::bf16:
      return "bf16";
    case DataType::i8:
      return "i8";
    case DataType::u8:
      return "u8";
    case DataType::i32:
      return "i32";
    case DataType::i64:
      return "i64";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::prod:
      return "prod";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
    case ReduceOp::avg:
      return "avg";
  }
  return "?";
}

std::optional<DataType> parse_data_type(std::string_view name) {
  const std::string n = lower(name);
  for (DataType t : kAllDataTypes)
    if (n == to_string(t)) return t;
  // nccl-tests' and common framework spellings.
  if (n == "float" || n == "float32") return DataType::f32;
  if (n == "double" || n == "float64") return DataType::f64;
  if (n == "half" || n == "float16") return DataType::f16;
  if (n == "bfloat16") return DataType::bf16;
  if (n == "int8" || n == "char") return DataType::i8;
  if (n == "uint8") return DataType::u8;
  if (n == "int32" || n == "int") return DataType::i32;
  if (n == "int64") return DataType::i64;
  return std::nullopt;
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  const std::string n = lower(name);
  for (ReduceOp op : kAllReduceOps)
    if (n == to_string(op)) return op;
  return std::nullopt;
}

bool is_supported(DataType type, ReduceOp op) {
  return op != ReduceOp::avg || is_floating(type);
}

double apply(ReduceOp op, double accumulated, double value) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return accumulated + value;
    case ReduceOp::prod:
      return accumulated * value;
    case ReduceOp::min:
      return std::min(accumulated, value);
    case ReduceOp::max:
      return std::max(accumulated, value);
  }
  return accumulated;
}

std::string_view version() {
  return ARCOLL_VERSION;
}
std::string_view git_commit() {
  return ARCOLL_GIT_COMMIT;
}

}  // namespace arcoll
