#include "replay/models/builder.hpp"

#include <stdexcept>

namespace arcoll::replay {

NetBuilder::NetBuilder(std::string model, int image_size, FeatureMap input) : map_(input) {
  model_.name = std::move(model);
  model_.image_size = image_size;
}

int NetBuilder::out_size(int in, int kernel, int stride, int pad, bool ceil_mode) {
  const int span = in + 2 * pad - kernel;
  if (span < 0) throw std::invalid_argument("the image is too small for this network");
  int out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // As in PyTorch: with ceil_mode the last window must start inside the input or left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

void NetBuilder::conv(const std::string& name, const Conv& c) {
  const int h = out_size(map_.height, c.kernel_h, c.stride, c.pad_h, false);
  const int w = out_size(map_.width, c.kernel_w, c.stride, c.pad_w, false);
  Layer layer;
  layer.name = name;
  layer.params.push_back({name + ".weight", {c.out, map_.channels, c.kernel_h, c.kernel_w}});
  if (c.bias) layer.params.push_back({name + ".bias", {c.out}});
  const double outputs = double(c.out) * h * w;
  const double macs = outputs * map_.channels * c.kernel_h * c.kernel_w;
  layer.forward_flops = 2 * macs + (c.bias ? outputs : 0);
  // The gradient for the input and the one for the weights each cost a forward pass.
  layer.backward_flops = 4 * macs;
  add(std::move(layer));
  map_ = {c.out, h, w};
}

void NetBuilder::batch_norm(const std::string& name) {
  Layer layer;
  layer.name = name;
  layer.params.push_back({name + ".weight", {map_.channels}});
  layer.params.push_back({name + ".bias", {map_.channels}});
  layer.forward_flops = 4 * map_.elements();  // normalise, scale, shift, statistics
  layer.backward_flops = 8 * map_.elements();
  add(std::move(layer));
}

void NetBuilder::conv_bn(const std::string& name, const Conv& c) {
  conv(name + ".conv", c);
  batch_norm(name + ".bn");
}

void NetBuilder::pool(const char* kind, int kernel, int stride, int pad, bool ceil_mode) {
  const int h = out_size(map_.height, kernel, stride, pad, ceil_mode);
  const int w = out_size(map_.width, kernel, stride, pad, ceil_mode);
  map_ = {map_.channels, h, w};
  Layer layer;
  layer.name = kind;
  layer.forward_flops = map_.elements() * kernel * kernel;
  layer.backward_flops = layer.forward_flops;
  add(std::move(layer));
}

void NetBuilder::max_pool(int kernel, int stride, int pad, bool ceil_mode) {
  pool("max_pool", kernel, stride, pad, ceil_mode);
}

void NetBuilder::avg_pool(int kernel, int stride, int pad, bool ceil_mode) {
  pool("avg_pool", kernel, stride, pad, ceil_mode);
}

void NetBuilder::adaptive_avg_pool(int height, int width) {
  Layer layer;
  layer.name = "adaptive_avg_pool";
  layer.forward_flops = map_.elements();
  layer.backward_flops = map_.elements();
  add(std::move(layer));
  map_ = {map_.channels, height, width};
}

void NetBuilder::linear(const std::string& name, int out) {
  const auto in = static_cast<std::int64_t>(map_.elements());
  Layer layer;
  layer.name = name;
  layer.params.push_back({name + ".weight", {out, in}});
  layer.params.push_back({name + ".bias", {out}});
  layer.forward_flops = 2.0 * double(in) * out + out;
  layer.backward_flops = 4.0 * double(in) * out;
  add(std::move(layer));
  map_ = {out, 1, 1};
}

}  // namespace arcoll::replay
