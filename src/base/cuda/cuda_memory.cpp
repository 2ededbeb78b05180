// CUDA's device memory for src/base/device_memory.hpp: found by cudaPointerGetAttributes, copied
// on a non-blocking stream of this process (one per GPU) after the work queued on the legacy
// default stream, which waits for the blocking streams (work on a non-blocking stream of the
// caller's must be synchronized by the caller first, as for any host read). Without a usable
// GPU (no driver, no device) it owns nothing: the runtime is asked once, then never again.
//
// Buffers shared with the other ranks of the host (CUDA IPC) are described by their allocation's
// handle and opened by the receiver, which copies from them (src/base/device_memory.hpp).
//
// Not cudaMemcpy: with processes sharing a GPU (H200, 2 processes), its copies of 16 KiB and
// less cost 124-277 us a pair (to the host and back) against 11-17 us for the same copies
// through a non-blocking stream.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "arcoll/error.hpp"
#include "src/base/cuda/kernels.hpp"
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

// Runs `work` with the GPU holding `device_side` current (the calling thread, an engine's or
// a worker's, may have another current), then makes the caller's current again.
template <class Work>
void on_device_of(const void* device_side, const char* what, Work work) {
  cudaPointerAttributes attributes{};
  check(cudaPointerGetAttributes(&attributes, device_side), what);
  int current = 0;
  check(cudaGetDevice(&current), what);
  if (current != attributes.device) check(cudaSetDevice(attributes.device), what);
  const cudaError_t code = work(copy_stream(attributes.device));
  if (current != attributes.device) (void)cudaSetDevice(current);
  check(code, what);
}

// Copies once what the legacy default stream of the GPU holding `device_side` is done, and
// waits for the copy.
void copy(void* into, const void* from, const void* device_side, std::size_t bytes,
          cudaMemcpyKind kind, const char* what) {
  on_device_of(device_side, what, [&](CopyStream& s) {
    cudaError_t code = cudaEventRecord(s.after_default, cudaStreamLegacy);
    if (code == cudaSuccess) code = cudaStreamWaitEvent(s.stream, s.after_default, 0);
    if (code == cudaSuccess) code = cudaMemcpyAsync(into, from, bytes, kind, s.stream);
    if (code == cudaSuccess) code = cudaStreamSynchronize(s.stream);
    return code;
  });
}

// The driver's cuPointerGetAttributes, through the runtime: the library links the static
// runtime only, and must load where no driver is.
CUresult pointer_attributes(unsigned count, CUpointer_attribute* which, void** data,
                            const void* address) {
  using Fn = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);
  static const Fn fn = [] {
    void* found = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &found, 12000, cudaEnableDefault,
                                         &status) != cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      found = nullptr;
    return reinterpret_cast<Fn>(found);
  }();
  if (fn == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return fn(count, which, data, reinterpret_cast<CUdeviceptr>(address));
}

bool shareable(const void* device) {
  int capable = 0;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
  void* data[] = {&capable};
  return pointer_attributes(1, which, data, device) == CUDA_SUCCESS && capable != 0;
}

// A buffer shared with another process of the host (cudaIpcGetMemHandle of its allocation,
// numbered by the driver's buffer id, unique for the life of the process), once the work
// queued on the legacy default stream before is done: the peer reads it then. Asked with the
// buffer's GPU current, whose context the driver's query needs.
void share(const void* device, DeviceMemoryShare& out) {
  CUdeviceptr base = 0;
  std::size_t size = 0;
  unsigned long long buffer_id = 0;
  cudaIpcMemHandle_t handle{};
  bool described = false;
  on_device_of(device, "the sharing of a device buffer", [&](CopyStream& s) {
    cudaError_t code = cudaEventRecord(s.after_default, cudaStreamLegacy);
    if (code == cudaSuccess) code = cudaEventSynchronize(s.after_default);
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
    void* data[] = {&base, &size, &buffer_id};
    described = code == cudaSuccess && pointer_attributes(3, which, data, device) == CUDA_SUCCESS;
    if (described) code = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
    return code;
  });
  if (!described)
    throw SystemError("cuda", "cuPointerGetAttributes failed: the buffer cannot be shared");
  static_assert(sizeof handle <= sizeof out.handle);
  std::copy_n("cuda", 5, out.kind.begin());
  out.allocation = buffer_id;
  out.base = base;
  out.offset = reinterpret_cast<std::uintptr_t>(device) - base;
  out.bytes = size;
  std::memcpy(out.handle.data(), &handle, sizeof handle);
}

// out = with op from on the GPU holding `out`, after the work queued on its legacy default
// stream; `from` in host memory, which a kernel cannot read, is copied to the device first.
void reduce(void* out, const void* with, const void* from, std::size_t count, DataType type,
            ReduceOp op) {
  static std::mutex mutex;                                      // the staging buffers below
  static std::map<int, std::pair<void*, std::size_t>> staging;  // by device, grown, kept
  const std::size_t bytes = count * size_of(type);
  if (bytes == 0) return;
  std::lock_guard lock(mutex);
  on_device_of(out, "the reduction", [&](CopyStream& s) {
    int device = 0;
    cudaError_t code = cudaGetDevice(&device);
    if (code == cudaSuccess) code = cudaEventRecord(s.after_default, cudaStreamLegacy);
    if (code == cudaSuccess) code = cudaStreamWaitEvent(s.stream, s.after_default, 0);
    const void* operand = from;
    if (code == cudaSuccess && !owns(from)) {
      auto& [buffer, size] = staging[device];
      if (size < bytes) {
        if (buffer != nullptr) (void)cudaFree(buffer);
        size = 0;
        code = cudaMalloc(&buffer, bytes);
        if (code == cudaSuccess) size = bytes;
      }
      if (code == cudaSuccess)
        code = cudaMemcpyAsync(buffer, from, bytes, cudaMemcpyHostToDevice, s.stream);
      operand = buffer;
    }
    if (code == cudaSuccess && out != with)
      code = cudaMemcpyAsync(out, with, bytes, cudaMemcpyDeviceToDevice, s.stream);
    if (code == cudaSuccess) code = cuda::reduce(out, operand, count, type, op, s.stream);
    return code == cudaSuccess ? cudaStreamSynchronize(s.stream) : code;
  });
}

// Opened on the GPU holding `near` (the receive buffer), where the copies and kernels that read
// it run; for a host buffer, on the calling thread's current GPU.
void* open(const DeviceMemoryShare& share, int /*pid*/, int /*pidfd*/, const void* near) {
  cudaIpcMemHandle_t handle{};
  std::memcpy(&handle, share.handle.data(), sizeof handle);
  void* base = nullptr;
  auto open_here = [&] {
    return cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
  };
  if (owns(near))
    on_device_of(near, "cudaIpcOpenMemHandle", [&](CopyStream&) { return open_here(); });
  else
    check(open_here(), "cudaIpcOpenMemHandle");
  return base;
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
    shareable,
    share,
    open,
    [](void* opened) { (void)cudaIpcCloseMemHandle(opened); },
    // Either side may be device memory, an opened peer's included (unified addressing).
    [](void* to, const void* from, std::size_t bytes) {
      copy(to, from, owns(to) ? to : from, bytes, cudaMemcpyDefault, "the copy from the peer");
    },
    [](std::size_t bytes, const void* near) {
      void* device = nullptr;
      on_device_of(near, "cudaMalloc", [&](CopyStream&) { return cudaMalloc(&device, bytes); });
      return device;
    },
    [](void* device) { (void)cudaFree(device); },
    reduce,
}};

}  // namespace
}  // namespace arcoll
