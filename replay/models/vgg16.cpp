// VGG-16 (configuration D of Simonyan and Zisserman), as torchvision defines it.
#include "replay/models/builder.hpp"

namespace arcoll::replay {
namespace {

Model vgg16(int image_size) {
  NetBuilder b("vgg16", image_size, {3, image_size, image_size});
  constexpr int kPool = 0;
  const int configuration[] = {64,    64,  kPool, 128, 128,   kPool, 256, 256, 256,
                               kPool, 512, 512,   512, kPool, 512,   512, 512, kPool};
  int index = 0;  // torchvision's module index in `features` (each conv is followed by a ReLU)
  for (int channels : configuration) {
    if (channels == kPool) {
      b.max_pool(2, 2);
      index += 1;
    } else {
      b.conv("features." + std::to_string(index), channels, 3, 1, 1, true);
      index += 2;
    }
  }
  b.adaptive_avg_pool(7, 7);
  b.linear("classifier.0", 4096);
  b.linear("classifier.3", 4096);
  b.linear("classifier.6", 1000);
  return b.take();
}

const ModelRegistrar kRegistrar({"vgg16", "VGG-16: 13 convolutions, 3 fully connected layers", 224,
                                 vgg16});

}  // namespace
}  // namespace arcoll::replay
