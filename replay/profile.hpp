// Compute profiles: how long a layer's FLOPs take on a device. Named GPU profiles carry the
// vendor's peak rates and a fraction of peak that convolutional training reaches; "cpu" is this
// machine, measured on the spot.
#pragma once

#include <string>
#include <vector>

namespace arcoll::replay {

struct DeviceProfile {
  std::string name;
  std::string summary;
  double f32_tflops = 0;  // peak, 32-bit math
  double f16_tflops = 0;  // peak, 16-bit math (tensor cores where the device has them)
  double efficiency = 0;  // fraction of peak the layers reach
  double seconds(double flops, bool half_precision) const {
    return flops / ((half_precision ? f16_tflops : f32_tflops) * 1e12 * efficiency);
  }
};

// The named profiles, "cpu" last (measured when asked for).
std::vector<std::string> device_profile_names();
// Throws std::invalid_argument naming the known profiles.
DeviceProfile device_profile(const std::string& name);

}  // namespace arcoll::replay
