// The networks arbench train trains, as libtorch modules cut into stages: a stage is what the
// layer profile times and what the replayer calls a layer (a convolution with its activation
// and pooling, a residual or inception block, a fully connected layer). Each network registers
// itself by name.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/base/registry.hpp"

namespace arbench::train {

class StagedNetImpl : public torch::nn::Module {
 public:
  // Appends a stage; `name` has no dots (libtorch's rule for submodule names).
  template <class ModuleHolder>
  void add(const std::string& name, ModuleHolder module) {
    register_module(name, module.ptr());
    stages_.push_back({name, module.ptr(),
                       [module](const torch::Tensor& x) mutable { return module->forward(x); }});
  }
  torch::Tensor forward(torch::Tensor x);

  struct Stage {
    std::string name;
    std::shared_ptr<torch::nn::Module> module;
    std::function<torch::Tensor(const torch::Tensor&)> forward;
  };
  const std::vector<Stage>& stages() const { return stages_; }

 private:
  std::vector<Stage> stages_;
};
TORCH_MODULE(StagedNet);

// What a network trains on.
enum class DataKind {
  fashion_mnist,  // 1 x 28 x 28, 10 classes, the real data set
  imagenet,       // 3 x 224 x 224, 1000 classes, synthetic batches (throughput only)
};

struct NetInfo {
  static constexpr const char* kKind = "model";
  std::string name;
  std::string summary;
  DataKind data = DataKind::fashion_mnist;
  // The replayer's model of the same network (its parameter count must be equal), or empty.
  std::string replay_model;
  std::function<StagedNet()> build;
};

using NetRegistry = arcoll::Registry<NetInfo>;
using NetRegistrar = arcoll::Registrar<NetInfo>;

// The input shape of one sample for `data`, and its number of classes.
std::vector<std::int64_t> sample_shape(DataKind data);
int class_count(DataKind data);
const char* data_name(DataKind data);

// A convolution with torchvision's options (square kernel, same padding on every side).
torch::nn::Conv2d conv(int in, int out, int kernel, int stride = 1, int pad = 0, bool bias = true);

}  // namespace arbench::train
