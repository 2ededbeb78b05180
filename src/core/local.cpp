#include "arcoll/local.hpp"

#include <string>

#include "arcoll/error.hpp"
#include "src/base/reduce.hpp"

namespace arcoll {

void reduce_local(const void* a, const void* b, void* out, std::size_t count, DataType type,
                  ReduceOp op) {
  if (op == ReduceOp::avg)
    throw InvalidArgument("reduce_local", "avg needs a world size to divide by: sum, then scale");
  if (!is_supported(type, op))
    throw InvalidArgument("reduce_local", std::string(to_string(op)) + " does not apply to " +
                                              std::string(to_string(type)));
  if (count > 0 && (a == nullptr || b == nullptr || out == nullptr))
    throw InvalidArgument("reduce_local", "null buffer for " + std::to_string(count) + " elements");
  kernels::reduce(out, a, b, count, type, op);
}

void copy_local(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && (dst == nullptr || src == nullptr))
    throw InvalidArgument("copy_local", "null buffer for " + std::to_string(bytes) + " bytes");
  kernels::copy(dst, src, bytes, kernels::Stores::by_size);
}

}  // namespace arcoll
