// AlexNet as torchvision defines it (the one-GPU variant of Krizhevsky et al., 2014).
#include "replay/models/builder.hpp"

namespace arcoll::replay {
namespace {

Model alexnet(int image_size) {
  NetBuilder b("alexnet", image_size, {3, image_size, image_size});
  b.conv("features.0", 64, 11, 4, 2, true);
  b.max_pool(3, 2);
  b.conv("features.3", 192, 5, 1, 2, true);
  b.max_pool(3, 2);
  b.conv("features.6", 384, 3, 1, 1, true);
  b.conv("features.8", 256, 3, 1, 1, true);
  b.conv("features.10", 256, 3, 1, 1, true);
  b.max_pool(3, 2);
  b.adaptive_avg_pool(6, 6);
  b.linear("classifier.1", 4096);
  b.linear("classifier.4", 4096);
  b.linear("classifier.6", 1000);
  return b.take();
}

const ModelRegistrar kRegistrar({"alexnet", "AlexNet: 5 convolutions, 3 fully connected layers",
                                 224, alexnet});

}  // namespace
}  // namespace arcoll::replay
