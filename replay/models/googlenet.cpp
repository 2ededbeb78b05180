// GoogLeNet (Inception v1, Szegedy et al.) as torchvision defines it: batch-normalised
// convolutions, and (as torchvision keeps for its weights) a 3x3 kernel where the paper's
// "5x5" branch has 5x5; without the auxiliary classifiers, which only training may add.
#include "replay/models/builder.hpp"

namespace arcoll::replay {
namespace {

struct InceptionWidths {
  int ch1x1, ch3x3_reduce, ch3x3, ch5x5_reduce, ch5x5, pool_proj;
};

void inception(NetBuilder& b, const std::string& name, const InceptionWidths& w) {
  const FeatureMap input = b.map();
  b.conv_bn(name + ".branch1", w.ch1x1, 1);
  b.set_map(input);
  b.conv_bn(name + ".branch2.0", w.ch3x3_reduce, 1);
  b.conv_bn(name + ".branch2.1", w.ch3x3, 3, 1, 1);
  b.set_map(input);
  b.conv_bn(name + ".branch3.0", w.ch5x5_reduce, 1);
  b.conv_bn(name + ".branch3.1", w.ch5x5, 3, 1, 1);
  b.set_map(input);
  b.max_pool(3, 1, 1, true);
  b.conv_bn(name + ".branch4.1", w.pool_proj, 1);
  b.concat(w.ch1x1 + w.ch3x3 + w.ch5x5 + w.pool_proj);
}

Model googlenet(int image_size) {
  NetBuilder b("googlenet", image_size, {3, image_size, image_size});
  b.conv_bn("conv1", 64, 7, 2, 3);
  b.max_pool(3, 2, 0, true);
  b.conv_bn("conv2", 64, 1);
  b.conv_bn("conv3", 192, 3, 1, 1);
  b.max_pool(3, 2, 0, true);
  inception(b, "inception3a", {64, 96, 128, 16, 32, 32});
  inception(b, "inception3b", {128, 128, 192, 32, 96, 64});
  b.max_pool(3, 2, 0, true);
  inception(b, "inception4a", {192, 96, 208, 16, 48, 64});
  inception(b, "inception4b", {160, 112, 224, 24, 64, 64});
  inception(b, "inception4c", {128, 128, 256, 24, 64, 64});
  inception(b, "inception4d", {112, 144, 288, 32, 64, 64});
  inception(b, "inception4e", {256, 160, 320, 32, 128, 128});
  b.max_pool(2, 2, 0, true);
  inception(b, "inception5a", {256, 160, 320, 32, 128, 128});
  inception(b, "inception5b", {384, 192, 384, 48, 128, 128});
  b.adaptive_avg_pool(1, 1);
  b.linear("fc", 1000);
  return b.take();
}

const ModelRegistrar kRegistrar({"googlenet", "GoogLeNet: 9 inception blocks, batch norm", 224,
                                 googlenet});

}  // namespace
}  // namespace arcoll::replay
