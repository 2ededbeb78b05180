#include "frameworks/torch/tensors.hpp"

#include <ATen/Functions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "src/base/device_memory.hpp"

namespace arcoll::torch_backend {
namespace {

// A CUDA tensor, where this build of arcoll takes CUDA memory: the work queued on its device's
// current stream (which may not be the legacy default stream arcoll orders its copies after)
// is waited for, so that what arcoll reads is written and what it writes is no longer read.
void check_cuda(const at::Tensor& t, const char* operation) {
  const bool takes_cuda = takes_cuda_tensors();
  TORCH_CHECK(t.device().is_cuda() && takes_cuda, "arcoll: ", operation, ": a tensor on ",
              t.device().str(), ": arcoll's torch backend takes CPU tensors",
              takes_cuda ? " and CUDA ones" : " (this arcoll was built without the CUDA toolkit)",
              "; move it with .cpu() or use another backend");
  if (t.numel() != 0)
    TORCH_CHECK(device_memory_of(t.data_ptr()) != nullptr, "arcoll: ", operation,
                ": the CUDA tensor's memory is not seen as CUDA's (no usable driver)");
  const c10::impl::DeviceGuardImplInterface* cuda =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  cuda->synchronizeStream(cuda->getStream(t.device()));
}

}  // namespace

bool takes_cuda_tensors() {
  static const bool takes = DeviceMemoryRegistry::instance().find("cuda") != nullptr;
  return takes;
}

DataType data_type(const at::Tensor& t, const char* operation) {
  if (!t.device().is_cpu()) check_cuda(t, operation);
  TORCH_CHECK(t.layout() == at::kStrided, "arcoll: ", operation, ": a ", t.layout(),
              " tensor: arcoll takes dense tensors");
  TORCH_CHECK(t.is_contiguous(), "arcoll: ", operation,
              ": a non-contiguous tensor: call .contiguous() first");
  switch (t.scalar_type()) {
    case at::kFloat:
      return DataType::f32;
    case at::kDouble:
      return DataType::f64;
    case at::kHalf:
      return DataType::f16;
    case at::kBFloat16:
      return DataType::bf16;
    case at::kChar:
      return DataType::i8;
    case at::kByte:
      return DataType::u8;
    case at::kInt:
      return DataType::i32;
    case at::kLong:
      return DataType::i64;
    default:
      TORCH_CHECK(false, "arcoll: ", operation, ": dtype ", t.scalar_type(),
                  " is not one arcoll carries (float32, float64, float16, bfloat16, int8, uint8, "
                  "int32, int64)");
  }
}

ReduceOp reduce_op(const c10d::ReduceOp& op, const char* operation) {
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return ReduceOp::sum;
    case c10d::ReduceOp::AVG:
      return ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT:
      return ReduceOp::prod;
    case c10d::ReduceOp::MIN:
      return ReduceOp::min;
    case c10d::ReduceOp::MAX:
      return ReduceOp::max;
    default:
      TORCH_CHECK(false, "arcoll: ", operation,
                  ": arcoll reduces with SUM, AVG, PRODUCT, MIN and MAX, not the bitwise or "
                  "premultiplied operators");
  }
}

const at::Tensor& one_tensor(const std::vector<at::Tensor>& tensors, const char* operation) {
  TORCH_CHECK(tensors.size() == 1, "arcoll: ", operation, " takes one tensor per process, not ",
              tensors.size());
  return tensors.front();
}

void check_blocks(const std::vector<at::Tensor>& blocks, const at::Tensor& like, int size,
                  const char* operation) {
  TORCH_CHECK(blocks.size() == static_cast<std::size_t>(size), "arcoll: ", operation, " takes ",
              size, " tensors (one per rank), not ", blocks.size());
  for (const at::Tensor& b : blocks) {
    TORCH_CHECK(b.numel() == like.numel() && b.scalar_type() == like.scalar_type(),
                "arcoll: ", operation, ": every rank's tensor has ", like.numel(), " elements of ",
                like.scalar_type(), ", not ", b.numel(), " of ", b.scalar_type());
    data_type(b, operation);
  }
}

at::Tensor flat_like(const at::Tensor& block, int blocks) {
  return at::empty({static_cast<int64_t>(blocks) * block.numel()}, block.options());
}

}  // namespace arcoll::torch_backend
