// What the torch backend takes from torch's calls: tensors checked for arcoll (device, layout,
// memory order, dtype), torch's reduction operators as arcoll's, and the one buffer that calls
// taking a list of per-rank tensors run on.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <vector>

#include "arcoll/types.hpp"

namespace arcoll::torch_backend {

// Whether this build takes CUDA tensors (it was built with the CUDA toolkit).
bool takes_cuda_tensors();
// The type of a tensor arcoll can take for `operation` (checked: device, layout, order; a CUDA
// tensor's queued work waited for); throws torch's error naming the operation otherwise.
DataType data_type(const at::Tensor& t, const char* operation);
ReduceOp reduce_op(const c10d::ReduceOp& op, const char* operation);
// The one tensor of a call that takes a list of one.
const at::Tensor& one_tensor(const std::vector<at::Tensor>& tensors, const char* operation);
// Every rank's tensor of a list, each like `like`.
void check_blocks(const std::vector<at::Tensor>& blocks, const at::Tensor& like, int size,
                  const char* operation);
// A tensor laid out as `blocks` one after another, for the calls that take one buffer.
at::Tensor flat_like(const at::Tensor& block, int blocks);

}  // namespace arcoll::torch_backend
