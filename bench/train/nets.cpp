// The networks for accuracy on Fashion-MNIST: a LeNet-5-class CNN and ResNet-18's layout
// narrowed for 28x28 images.
#include "nets.hpp"

namespace arbench::train {

torch::Tensor StagedNetImpl::forward(torch::Tensor x) {
  for (Stage& stage : stages_) x = stage.forward(x);
  return x;
}

std::vector<std::int64_t> sample_shape(DataKind data) {
  return data == DataKind::imagenet ? std::vector<std::int64_t>{3, 224, 224}
                                    : std::vector<std::int64_t>{1, 28, 28};
}

int class_count(DataKind data) {
  return data == DataKind::imagenet ? 1000 : 10;
}

const char* data_name(DataKind data) {
  return data == DataKind::imagenet ? "synthetic ImageNet-shaped batches" : "Fashion-MNIST";
}

torch::nn::Conv2d conv(int in, int out, int kernel, int stride, int pad, bool bias) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(pad).bias(bias));
}

namespace {

namespace nn = torch::nn;

// Caffe's LeNet (20 and 50 filters of 5x5, 500 hidden units) with ReLUs: LeNet-5's shape at a
// width that reaches 90% on Fashion-MNIST in a few epochs.
StagedNet lenet() {
  StagedNet net;
  net->add("conv1", nn::Sequential(conv(1, 20, 5), nn::ReLU(), nn::MaxPool2d(2)));
  net->add("conv2", nn::Sequential(conv(20, 50, 5), nn::ReLU(), nn::MaxPool2d(2)));
  net->add("fc1", nn::Sequential(nn::Flatten(), nn::Linear(800, 500), nn::ReLU()));
  net->add("fc2", nn::Linear(500, 10));
  return net;
}

// ResNet's basic block: two 3x3 convolutions with batch norm and a shortcut (a strided 1x1
// convolution where the shape changes).
class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(int in, int out, int stride)
      : conv1_(register_module("conv1", conv(in, out, 3, stride, 1, false))),
        bn1_(register_module("bn1", nn::BatchNorm2d(out))),
        conv2_(register_module("conv2", conv(out, out, 3, 1, 1, false))),
        bn2_(register_module("bn2", nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out)
      downsample_ = register_module(
          "downsample", nn::Sequential(conv(in, out, 1, stride, 0, false), nn::BatchNorm2d(out)));
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = torch::relu(bn1_(conv1_(x)));
    out = bn2_(conv2_(out));
    return torch::relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// ResNet-18's layout (a stem, four stages of two basic blocks, pooling, one classifier) at a
// quarter of its width, with a 3x3 stem and no max pooling so that 28x28 inputs keep a
// 4x4 map at the last stage.
StagedNet resnet18() {
  StagedNet net;
  net->add("stem", nn::Sequential(conv(1, 16, 3, 1, 1, false), nn::BatchNorm2d(16), nn::ReLU()));
  int in = 16;
  for (int stage = 0; stage < 4; ++stage) {
    const int out = 16 << stage;
    for (int block = 0; block < 2; ++block) {
      net->add("layer" + std::to_string(stage + 1) + "_" + std::to_string(block),
               BasicBlock(in, out, block == 0 && stage > 0 ? 2 : 1));
      in = out;
    }
  }
  net->add("fc", nn::Sequential(nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(128, 10)));
  return net;
}

const NetRegistrar kLenet({"lenet", "LeNet-5-class CNN (2 conv, 2 fc; 431k parameters)",
                           DataKind::fashion_mnist, "", lenet});
const NetRegistrar kResnet18({"resnet18",
                              "ResNet-18 layout narrowed for 28x28 (8 basic blocks, 16-128 "
                              "channels; 0.7M parameters)",
                              DataKind::fashion_mnist, "", resnet18});

}  // namespace
}  // namespace arbench::train
