#include "replay/profile.hpp"

#include <chrono>
#include <stdexcept>
#include <vector>

namespace arcoll::replay {
namespace {

// Vendors' peak rates (dense, boost clock). The efficiency is what well-tuned CNN training
// reaches of that peak: about half of 32-bit peak, less of tensor-core peak.
const DeviceProfile kProfiles[] = {
    {"p40", "NVIDIA Tesla P40 (Pascal): 11.8 TFLOPS f32, no fast f16", 11.8, 11.8 / 64, 0.5},
    {"p100", "NVIDIA Tesla P100 SXM2 (Pascal): 10.6 TFLOPS f32, 21.2 f16", 10.6, 21.2, 0.5},
    {"v100", "NVIDIA Tesla V100 SXM2 (Volta): 15.7 TFLOPS f32, 125 f16 tensor", 15.7, 125, 0.45},
    {"a100", "NVIDIA A100 SXM4 (Ampere): 19.5 TFLOPS f32, 312 f16/bf16 tensor", 19.5, 312, 0.4},
    {"h100", "NVIDIA H100 SXM5 (Hopper): 67 TFLOPS f32, 989 bf16 tensor", 67, 989, 0.35},
};

// One core's sustained multiply-add rate on cache-resident data: what a rank of this machine
// computes with (the ranks share the cores).
double measure_cpu_gflops() {
  std::vector<float> x(4096, 1.0f), y(4096, 0.0f);
  const float a = 0.999f;
  long long elements = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  while (seconds < 0.1) {
    for (int repeat = 0; repeat < 64; ++repeat)
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = a * y[i] + x[i];
    elements += 64 * static_cast<long long>(x.size());
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  volatile float sink = y[0];
  (void)sink;
  return 2.0 * static_cast<double>(elements) / seconds / 1e9;
}

}  // namespace

std::vector<std::string> device_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : kProfiles) names.push_back(p.name);
  names.push_back("cpu");
  return names;
}

DeviceProfile device_profile(const std::string& name) {
  for (const auto& p : kProfiles)
    if (p.name == name) return p;
  if (name == "cpu") {
    const double tflops = measure_cpu_gflops() / 1e3;
    return {"cpu",
            "this machine, one core measured just now: " + std::to_string(tflops * 1e3) +
                " GFLOPS (f16 computed as f32)",
            tflops, tflops, 0.5};
  }
  std::string known;
  for (const auto& n : device_profile_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown device profile '" + name + "' (known: " + known + ")");
}

}  // namespace arcoll::replay
