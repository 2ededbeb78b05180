// CUDA's device memory for base/device_memory.hpp: found by cudaPointerGetAttributes, copied
// by cudaMemcpy (after the work queued on the legacy default stream, which waits for the
// blocking streams; work on a non-blocking stream must be synchronized by the caller first, as
// for any host read). Without a usable GPU (no driver, no
// device) it owns nothing: the runtime is asked once, then never again.
#include <cuda_runtime.h>

#include <string>

#include "arcoll/error.hpp"
#include "base/device_memory.hpp"

namespace arcoll {
namespace {

bool have_device() {
  static const bool present = [] {
    int devices = 0;
    return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  }();
  return present;
}

void check(cudaError_t code, const char* what) {
  if (code != cudaSuccess)
    throw SystemError("cuda", std::string(what) + " failed: " + cudaGetErrorString(code));
}

bool owns(const void* address) {
  if (!have_device()) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, address) != cudaSuccess) {
    (void)cudaGetLastError();  // not CUDA's: clear the error it left
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice;
}

const DeviceMemoryRegistrar kCudaMemory{{
    "cuda",
    owns,
    [](void* host, const void* device, std::size_t bytes) {
      check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    },
    [](void* device, const void* host, std::size_t bytes) {
      check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
    },
    [](std::size_t bytes) {
      void* host = nullptr;
      check(cudaMallocHost(&host, bytes), "cudaMallocHost");
      return host;
    },
    [](void* host) { cudaFreeHost(host); },
}};

}  // namespace
}  // namespace arcoll
