// Builds a model layer by layer the way its reference definition reads: each call adds one
// module (its tensors and its FLOPs per sample) and moves the feature map's shape along, so
// that shapes and compute follow from the architecture instead of being typed in.
#pragma once

#include <string>

#include "replay/model.hpp"

namespace arcoll::replay {

struct FeatureMap {
  int channels = 0, height = 0, width = 0;
  double elements() const { return double(channels) * height * width; }
};

class NetBuilder {
 public:
  NetBuilder(std::string model, int image_size, FeatureMap input);

  FeatureMap map() const { return map_; }
  // Branches of an inception block start from the same map; concat() joins them.
  void set_map(FeatureMap map) { map_ = map; }
  void concat(int channels) { map_.channels = channels; }

  struct Conv {
    int out = 0;
    int kernel_h = 1, kernel_w = 1;
    int stride = 1;
    int pad_h = 0, pad_w = 0;
    bool bias = true;
  };
  void conv(const std::string& name, const Conv& c);
  // A square kernel with the same padding on every side.
  void conv(const std::string& name, int out, int kernel, int stride, int pad, bool bias) {
    conv(name, Conv{out, kernel, kernel, stride, pad, pad, bias});
  }
  void batch_norm(const std::string& name);
  // Convolution without bias followed by batch norm: torchvision's BasicConv2d (name.conv,
  // name.bn).
  void conv_bn(const std::string& name, const Conv& c);
  void conv_bn(const std::string& name, int out, int kernel, int stride = 1, int pad = 0) {
    conv_bn(name, Conv{out, kernel, kernel, stride, pad, pad, false});
  }
  void max_pool(int kernel, int stride, int pad = 0, bool ceil_mode = false);
  void avg_pool(int kernel, int stride, int pad = 0, bool ceil_mode = false);
  void adaptive_avg_pool(int height, int width);
  // Flattens the map and applies a fully connected layer with bias.
  void linear(const std::string& name, int out);

  Model take() { return std::move(model_); }

 private:
  static int out_size(int in, int kernel, int stride, int pad, bool ceil_mode);
  void pool(const char* kind, int kernel, int stride, int pad, bool ceil_mode);
  void add(Layer layer) { model_.layers.push_back(std::move(layer)); }
  Model model_;
  FeatureMap map_;
};

}  // namespace arcoll::replay
