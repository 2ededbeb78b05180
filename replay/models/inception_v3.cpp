// Inception-v3 (Szegedy et al., 2016) as torchvision defines it, with its auxiliary classifier
// (on in training), at 299x299.
#include "replay/models/builder.hpp"

namespace arcoll::replay {
namespace {

using Conv = NetBuilder::Conv;

// Factorised kernels: 1xn and nx1 with "same" padding.
Conv row(int out, int n) {
  return {out, 1, n, 1, 0, n / 2, false};
}
Conv column(int out, int n) {
  return {out, n, 1, 1, n / 2, 0, false};
}

void inception_a(NetBuilder& b, const std::string& name, int pool_features) {
  const FeatureMap input = b.map();
  b.conv_bn(name + ".branch1x1", 64, 1);
  b.set_map(input);
  b.conv_bn(name + ".branch5x5_1", 48, 1);
  b.conv_bn(name + ".branch5x5_2", 64, 5, 1, 2);
  b.set_map(input);
  b.conv_bn(name + ".branch3x3dbl_1", 64, 1);
  b.conv_bn(name + ".branch3x3dbl_2", 96, 3, 1, 1);
  b.conv_bn(name + ".branch3x3dbl_3", 96, 3, 1, 1);
  b.set_map(input);
  b.avg_pool(3, 1, 1);
  b.conv_bn(name + ".branch_pool", pool_features, 1);
  b.concat(64 + 64 + 96 + pool_features);
}

void inception_b(NetBuilder& b, const std::string& name) {
  const FeatureMap input = b.map();
  b.conv_bn(name + ".branch3x3", 384, 3, 2);
  b.set_map(input);
  b.conv_bn(name + ".branch3x3dbl_1", 64, 1);
  b.conv_bn(name + ".branch3x3dbl_2", 96, 3, 1, 1);
  b.conv_bn(name + ".branch3x3dbl_3", 96, 3, 2);
  b.set_map(input);
  b.max_pool(3, 2);
  b.concat(384 + 96 + input.channels);
}

void inception_c(NetBuilder& b, const std::string& name, int c7) {
  const FeatureMap input = b.map();
  b.conv_bn(name + ".branch1x1", 192, 1);
  b.set_map(input);
  b.conv_bn(name + ".branch7x7_1", c7, 1);
  b.conv_bn(name + ".branch7x7_2", row(c7, 7));
  b.conv_bn(name + ".branch7x7_3", column(192, 7));
  b.set_map(input);
  b.conv_bn(name + ".branch7x7dbl_1", c7, 1);
  b.conv_bn(name + ".branch7x7dbl_2", column(c7, 7));
  b.conv_bn(name + ".branch7x7dbl_3", row(c7, 7));
  b.conv_bn(name + ".branch7x7dbl_4", column(c7, 7));
  b.conv_bn(name + ".branch7x7dbl_5", row(192, 7));
  b.set_map(input);
  b.avg_pool(3, 1, 1);
  b.conv_bn(name + ".branch_pool", 192, 1);
  b.concat(4 * 192);
}

void inception_d(NetBuilder& b, const std::string& name) {
  const FeatureMap input = b.map();
  b.conv_bn(name + ".branch3x3_1", 192, 1);
  b.conv_bn(name + ".branch3x3_2", 320, 3, 2);
  b.set_map(input);
  b.conv_bn(name + ".branch7x7x3_1", 192, 1);
  b.conv_bn(name + ".branch7x7x3_2", row(192, 7));
  b.conv_bn(name + ".branch7x7x3_3", column(192, 7));
  b.conv_bn(name + ".branch7x7x3_4", 192, 3, 2);
  b.set_map(input);
  b.max_pool(3, 2);
  b.concat(320 + 192 + input.channels);
}

void inception_e(NetBuilder& b, const std::string& name) {
  const FeatureMap input = b.map();
  b.conv_bn(name + ".branch1x1", 320, 1);
  b.set_map(input);
  b.conv_bn(name + ".branch3x3_1", 384, 1);
  const FeatureMap split = b.map();
  b.conv_bn(name + ".branch3x3_2a", row(384, 3));
  b.set_map(split);
  b.conv_bn(name + ".branch3x3_2b", column(384, 3));
  b.set_map(input);
  b.conv_bn(name + ".branch3x3dbl_1", 448, 1);
  b.conv_bn(name + ".branch3x3dbl_2", 384, 3, 1, 1);
  const FeatureMap split_dbl = b.map();
  b.conv_bn(name + ".branch3x3dbl_3a", row(384, 3));
  b.set_map(split_dbl);
  b.conv_bn(name + ".branch3x3dbl_3b", column(384, 3));
  b.set_map(input);
  b.avg_pool(3, 1, 1);
  b.conv_bn(name + ".branch_pool", 192, 1);
  b.concat(320 + 2 * 384 + 2 * 384 + 192);
}

// The auxiliary classifier reads Mixed_6e's output; the main path goes on from there.
void auxiliary(NetBuilder& b) {
  const FeatureMap input = b.map();
  b.avg_pool(5, 3);
  b.conv_bn("AuxLogits.conv0", 128, 1);
  b.conv_bn("AuxLogits.conv1", 768, 5);
  b.adaptive_avg_pool(1, 1);
  b.linear("AuxLogits.fc", 1000);
  b.set_map(input);
}

Model inception_v3(int image_size) {
  NetBuilder b("inception_v3", image_size, {3, image_size, image_size});
  b.conv_bn("Conv2d_1a_3x3", 32, 3, 2);
  b.conv_bn("Conv2d_2a_3x3", 32, 3);
  b.conv_bn("Conv2d_2b_3x3", 64, 3, 1, 1);
  b.max_pool(3, 2);
  b.conv_bn("Conv2d_3b_1x1", 80, 1);
  b.conv_bn("Conv2d_4a_3x3", 192, 3);
  b.max_pool(3, 2);
  inception_a(b, "Mixed_5b", 32);
  inception_a(b, "Mixed_5c", 64);
  inception_a(b, "Mixed_5d", 64);
  inception_b(b, "Mixed_6a");
  inception_c(b, "Mixed_6b", 128);
  inception_c(b, "Mixed_6c", 160);
  inception_c(b, "Mixed_6d", 160);
  inception_c(b, "Mixed_6e", 192);
  auxiliary(b);
  inception_d(b, "Mixed_7a");
  inception_e(b, "Mixed_7b");
  inception_e(b, "Mixed_7c");
  b.adaptive_avg_pool(1, 1);
  b.linear("fc", 1000);
  return b.take();
}

const ModelRegistrar kRegistrar({"inception_v3",
                                 "Inception-v3: factorised inception blocks, auxiliary classifier",
                                 299, inception_v3});

}  // namespace
}  // namespace arcoll::replay
