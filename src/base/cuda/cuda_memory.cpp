// CUDA's device memory for src/base/device_memory.hpp: found by cudaPointerGetAttributes, copied
// on a non-blocking stream of this process (one per GPU) after the work queued on the legacy
// default stream, which waits for the blocking streams (work on a non-blocking stream of the
// caller's must be synchronized by the caller first, as for any host read). Without a usable
// GPU (no driver, no device) it owns nothing: the runtime is asked once, then never again.
//
// Not cudaMemcpy: with processes sharing a GPU (H200, 2 processes), its copies of 16 KiB and
// less cost 124-277 us a pair (to the host and back) against 11-17 us for the same copies
// through a non-blocking stream.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <string>

#include "arcoll/error.hpp"
#include "src/base/device_memory.hpp"

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

// This process's stream on one GPU, and the event that orders it after that GPU's legacy
// default stream; made on first use, kept to the end of the process.
struct CopyStream {
  cudaStream_t stream = nullptr;
  cudaEvent_t after_default = nullptr;
};
CopyStream& copy_stream(int device) {
  static std::mutex mutex;
  static std::map<int, CopyStream> by_device;
  std::lock_guard lock(mutex);
  CopyStream& s = by_device[device];
  if (s.stream == nullptr) {
    check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreateWithFlags(&s.after_default, cudaEventDisableTiming), "cudaEventCreate");
  }
  return s;
}

// Copies once what the legacy default stream of the GPU holding `device_side` is done, and
// waits for the copy. The calling thread (an engine's, a worker's) may have another GPU
// current: that of the memory is made current for the copy, then the caller's again.
void copy(void* into, const void* from, const void* device_side, std::size_t bytes,
          cudaMemcpyKind kind, const char* what) {
  cudaPointerAttributes attributes{};
  check(cudaPointerGetAttributes(&attributes, device_side), what);
  int current = 0;
  check(cudaGetDevice(&current), what);
  if (current != attributes.device) check(cudaSetDevice(attributes.device), what);
  CopyStream& s = copy_stream(attributes.device);
  cudaError_t code = cudaEventRecord(s.after_default, cudaStreamLegacy);
  if (code == cudaSuccess) code = cudaStreamWaitEvent(s.stream, s.after_default, 0);
  if (code == cudaSuccess) code = cudaMemcpyAsync(into, from, bytes, kind, s.stream);
  if (code == cudaSuccess) code = cudaStreamSynchronize(s.stream);
  if (current != attributes.device) (void)cudaSetDevice(current);
  check(code, what);
}

const DeviceMemoryRegistrar kCudaMemory{{
    "cuda",
    owns,
    [](void* host, const void* device, std::size_t bytes) {
      copy(host, device, device, bytes, cudaMemcpyDeviceToHost, "the copy to the host");
    },
    [](void* device, const void* host, std::size_t bytes) {
      copy(device, host, device, bytes, cudaMemcpyHostToDevice, "the copy to the device");
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
