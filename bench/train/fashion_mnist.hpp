// Fashion-MNIST as Debian's dataset-fashion-mnist ships it: gzipped IDX files (60,000 training
// and 10,000 test images of 28x28 bytes, labels 0-9), read with zlib into tensors.
#pragma once

#include <torch/torch.h>

#include <string>

namespace arbench::train {

struct LabelledImages {
  torch::Tensor images;  // N x 1 x 28 x 28 float, normalised to the training set's mean and spread
  torch::Tensor labels;  // N int64
};

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// `split` is "train" or "t10k". A missing, unreadable, truncated or malformed file throws
// std::runtime_error naming the file and what is wrong with it.
LabelledImages load_fashion_mnist(const std::string& directory, const std::string& split);

}  // namespace arbench::train
