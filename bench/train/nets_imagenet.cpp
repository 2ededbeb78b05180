// The replayer's ImageNet networks as libtorch modules, as torchvision defines them: the same
// tensors in the same order as replay/models/ (the test of arbench train checks the counts).
// They train on synthetic batches, for throughput.
#include "nets.hpp"

namespace arbench::train {
namespace {

namespace nn = torch::nn;

nn::MaxPool2d max_pool(int kernel, int stride, int pad = 0, bool ceil_mode = false) {
  return nn::MaxPool2d(
      nn::MaxPool2dOptions(kernel).stride(stride).padding(pad).ceil_mode(ceil_mode));
}

StagedNet alexnet() {
  StagedNet net;
  net->add("conv1", nn::Sequential(conv(3, 64, 11, 4, 2), nn::ReLU(), max_pool(3, 2)));
  net->add("conv2", nn::Sequential(conv(64, 192, 5, 1, 2), nn::ReLU(), max_pool(3, 2)));
  net->add("conv3", nn::Sequential(conv(192, 384, 3, 1, 1), nn::ReLU()));
  net->add("conv4", nn::Sequential(conv(384, 256, 3, 1, 1), nn::ReLU()));
  net->add("conv5", nn::Sequential(conv(256, 256, 3, 1, 1), nn::ReLU(), max_pool(3, 2),
                                   nn::AdaptiveAvgPool2d(6), nn::Flatten()));
  net->add("fc6", nn::Sequential(nn::Dropout(0.5), nn::Linear(256 * 6 * 6, 4096), nn::ReLU()));
  net->add("fc7", nn::Sequential(nn::Dropout(0.5), nn::Linear(4096, 4096), nn::ReLU()));
  net->add("fc8", nn::Linear(4096, 1000));
  return net;
}

// torchvision's BasicConv2d: convolution without bias, batch norm, ReLU.
class ConvBnImpl : public nn::Module {
 public:
  ConvBnImpl(int in, int out, int kernel, int stride = 1, int pad = 0)
      : conv_(register_module("conv", conv(in, out, kernel, stride, pad, false))),
        bn_(register_module("bn", nn::BatchNorm2d(nn::BatchNorm2dOptions(out).eps(0.001)))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::relu(bn_(conv_(x))); }

 private:
  nn::Conv2d conv_;
  nn::BatchNorm2d bn_;
};
TORCH_MODULE(ConvBn);

struct InceptionWidths {
  int ch1x1, ch3x3_reduce, ch3x3, ch5x5_reduce, ch5x5, pool_proj;
};

class InceptionImpl : public nn::Module {
 public:
  InceptionImpl(int in, const InceptionWidths& w)
      : branch1_(register_module("branch1", ConvBn(in, w.ch1x1, 1))),
        branch2_(
            register_module("branch2", nn::Sequential(ConvBn(in, w.ch3x3_reduce, 1),
                                                      ConvBn(w.ch3x3_reduce, w.ch3x3, 3, 1, 1)))),
        // torchvision keeps a 3x3 kernel in the branch the paper gives 5x5.
        branch3_(
            register_module("branch3", nn::Sequential(ConvBn(in, w.ch5x5_reduce, 1),
                                                      ConvBn(w.ch5x5_reduce, w.ch5x5, 3, 1, 1)))),
        branch4_(register_module(
            "branch4", nn::Sequential(max_pool(3, 1, 1, true), ConvBn(in, w.pool_proj, 1)))) {}
  torch::Tensor forward(torch::Tensor x) {
    return torch::cat(
        {branch1_->forward(x), branch2_->forward(x), branch3_->forward(x), branch4_->forward(x)},
        1);
  }

 private:
  ConvBn branch1_;
  nn::Sequential branch2_, branch3_, branch4_;
};
TORCH_MODULE(Inception);

// GoogLeNet without the auxiliary classifiers.
StagedNet googlenet() {
  StagedNet net;
  net->add("conv1", nn::Sequential(ConvBn(3, 64, 7, 2, 3), max_pool(3, 2, 0, true)));
  net->add("conv2", ConvBn(64, 64, 1));
  net->add("conv3", nn::Sequential(ConvBn(64, 192, 3, 1, 1), max_pool(3, 2, 0, true)));
  net->add("inception3a", Inception(192, InceptionWidths{64, 96, 128, 16, 32, 32}));
  net->add("inception3b", Inception(256, InceptionWidths{128, 128, 192, 32, 96, 64}));
  net->add("pool3", max_pool(3, 2, 0, true));
  net->add("inception4a", Inception(480, InceptionWidths{192, 96, 208, 16, 48, 64}));
  net->add("inception4b", Inception(512, InceptionWidths{160, 112, 224, 24, 64, 64}));
  net->add("inception4c", Inception(512, InceptionWidths{128, 128, 256, 24, 64, 64}));
  net->add("inception4d", Inception(512, InceptionWidths{112, 144, 288, 32, 64, 64}));
  net->add("inception4e", Inception(528, InceptionWidths{256, 160, 320, 32, 128, 128}));
  net->add("pool4", max_pool(2, 2, 0, true));
  net->add("inception5a", Inception(832, InceptionWidths{256, 160, 320, 32, 128, 128}));
  net->add("inception5b", Inception(832, InceptionWidths{384, 192, 384, 48, 128, 128}));
  net->add("fc", nn::Sequential(nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Dropout(0.2),
                                nn::Linear(1024, 1000)));
  return net;
}

// ResNet-50's bottleneck (v1.5: the stride on the 3x3 convolution).
class BottleneckImpl : public nn::Module {
 public:
  BottleneckImpl(int in, int planes, int stride)
      : conv1_(register_module("conv1", conv(in, planes, 1, 1, 0, false))),
        bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
        conv2_(register_module("conv2", conv(planes, planes, 3, stride, 1, false))),
        bn2_(register_module("bn2", nn::BatchNorm2d(planes))),
        conv3_(register_module("conv3", conv(planes, planes * 4, 1, 1, 0, false))),
        bn3_(register_module("bn3", nn::BatchNorm2d(planes * 4))) {
    if (stride != 1 || in != planes * 4)
      downsample_ = register_module(
          "downsample",
          nn::Sequential(conv(in, planes * 4, 1, stride, 0, false), nn::BatchNorm2d(planes * 4)));
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor out = torch::relu(bn1_(conv1_(x)));
    out = torch::relu(bn2_(conv2_(out)));
    out = bn3_(conv3_(out));
    return torch::relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  nn::Conv2d conv1_;
  nn::BatchNorm2d bn1_;
  nn::Conv2d conv2_;
  nn::BatchNorm2d bn2_;
  nn::Conv2d conv3_;
  nn::BatchNorm2d bn3_;
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(Bottleneck);

StagedNet resnet50() {
  StagedNet net;
  net->add("stem", nn::Sequential(conv(3, 64, 7, 2, 3, false), nn::BatchNorm2d(64), nn::ReLU(),
                                  max_pool(3, 2, 1)));
  const int blocks[] = {3, 4, 6, 3};
  int in = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const int planes = 64 << layer;
    for (int block = 0; block < blocks[layer]; ++block) {
      net->add("layer" + std::to_string(layer + 1) + "_" + std::to_string(block),
               Bottleneck(in, planes, block == 0 && layer > 0 ? 2 : 1));
      in = planes * 4;
    }
  }
  net->add("fc", nn::Sequential(nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(2048, 1000)));
  return net;
}

const NetRegistrar kAlexnet({"alexnet", "AlexNet (61M parameters), synthetic 224x224 batches",
                             DataKind::imagenet, "alexnet", alexnet});
const NetRegistrar kGooglenet({"googlenet",
                               "GoogLeNet (6.6M parameters), synthetic 224x224 batches",
                               DataKind::imagenet, "googlenet", googlenet});
const NetRegistrar kResnet50({"resnet50", "ResNet-50 (25.6M parameters), synthetic 224x224 batches",
                              DataKind::imagenet, "resnet50", resnet50});

}  // namespace
}  // namespace arbench::train
