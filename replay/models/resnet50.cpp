// ResNet-50 as torchvision defines it (v1.5: the stride of a downsampling bottleneck is on its
// 3x3 convolution).
#include "replay/models/builder.hpp"

namespace arcoll::replay {
namespace {

constexpr int kExpansion = 4;

void bottleneck(NetBuilder& b, const std::string& name, int planes, int stride, bool downsample) {
  const FeatureMap input = b.map();
  b.conv(name + ".conv1", planes, 1, 1, 0, false);
  b.batch_norm(name + ".bn1");
  b.conv(name + ".conv2", planes, 3, stride, 1, false);
  b.batch_norm(name + ".bn2");
  b.conv(name + ".conv3", planes * kExpansion, 1, 1, 0, false);
  b.batch_norm(name + ".bn3");
  if (downsample) {
    const FeatureMap out = b.map();
    b.set_map(input);
    b.conv(name + ".downsample.0", planes * kExpansion, 1, stride, 0, false);
    b.batch_norm(name + ".downsample.1");
    b.set_map(out);
  }
}

Model resnet50(int image_size) {
  NetBuilder b("resnet50", image_size, {3, image_size, image_size});
  b.conv("conv1", 64, 7, 2, 3, false);
  b.batch_norm("bn1");
  b.max_pool(3, 2, 1);
  const int blocks[] = {3, 4, 6, 3};
  for (int layer = 0; layer < 4; ++layer) {
    const int planes = 64 << layer;
    for (int block = 0; block < blocks[layer]; ++block) {
      const int stride = block == 0 && layer > 0 ? 2 : 1;
      bottleneck(b, "layer" + std::to_string(layer + 1) + "." + std::to_string(block), planes,
                 stride, block == 0);
    }
  }
  b.adaptive_avg_pool(1, 1);
  b.linear("fc", 1000);
  return b.take();
}

const ModelRegistrar kRegistrar({"resnet50", "ResNet-50: 16 bottleneck blocks, batch norm", 224,
                                 resnet50});

}  // namespace
}  // namespace arcoll::replay
