// The CUDA kernels against the GPU's own copy, in one run: device-to-device cudaMemcpy, the
// reduction kernel (sum, f32, f16, bf16), narrowing and widening for the mixed-precision wire,
// and copies between pinned host memory and the device (the staged path's bound). Bandwidth
// counts the bytes each moves through memory (a copy reads and writes each byte: 2; a reduction
// reads two and writes one: 3), so the kernels' figures compare with the copy's directly.
//
// Usage: cuda_kernel_bench [--min-bytes N] [--max-bytes N] [--iters N]; exit 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "src/base/cuda/kernels.hpp"

namespace {

void check(cudaError_t code, const char* what) {
  if (code != cudaSuccess) {
    std::fprintf(stderr, "cuda_kernel_bench: %s failed: %s\n", what, cudaGetErrorString(code));
    std::exit(1);
  }
}

// Seconds per call: the mean of `iters` calls after two warm-ups, by CUDA events.
double seconds_per_call(const std::function<void()>& call, int iters, cudaStream_t stream) {
  call();
  call();
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) call();
  check(cudaEventRecord(stop, stream), "cudaEventRecord");
  check(cudaEventSynchronize(stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / iters;
}

std::size_t parse_bytes(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (*end) {
    case 'K':
      value *= 1024;
      break;
    case 'M':
      value *= 1024 * 1024;
      break;
    case 'G':
      value *= 1024.0 * 1024 * 1024;
      break;
    default:
      break;
  }
  return static_cast<std::size_t>(value);
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_bytes = 1 << 20, max_bytes = std::size_t{256} << 20;
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--min-bytes") == 0)
      min_bytes = parse_bytes(argv[i + 1]);
    else if (std::strcmp(argv[i], "--max-bytes") == 0)
      max_bytes = parse_bytes(argv[i + 1]);
    else if (std::strcmp(argv[i], "--iters") == 0)
      iters = std::max(1, std::atoi(argv[i + 1]));
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no GPU (cudaGetDeviceCount found none)\n");
    return 77;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf(
      "# %s, %d multiprocessors; GB/s of memory traffic (copy: 2 bytes per byte, "
      "reduce: 3, narrow/widen: 6 per f32)\n",
      prop.name, prop.multiProcessorCount);
  std::printf("%12s  %-22s %10s %10s %9s\n", "bytes", "operation", "time_us", "GB/s", "of_copy");
  void *a = nullptr, *b = nullptr, *pinned = nullptr;
  check(cudaMalloc(&a, max_bytes), "cudaMalloc");
  check(cudaMalloc(&b, max_bytes), "cudaMalloc");
  check(cudaMallocHost(&pinned, max_bytes), "cudaMallocHost");
  check(cudaMemset(a, 0, max_bytes), "cudaMemset");
  check(cudaMemset(b, 0, max_bytes), "cudaMemset");
  std::memset(pinned, 0, max_bytes);
  cudaStream_t stream;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    const double copy = seconds_per_call(
        [&] { check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream), "copy"); },
        iters, stream);
    const double copy_gbs = 2.0 * bytes / copy / 1e9;
    auto row = [&](const char* name, double seconds, double traffic) {
      const double gbs = traffic / seconds / 1e9;
      std::printf("%12zu  %-22s %10.1f %10.1f %8.0f%%\n", bytes, name, seconds * 1e6, gbs,
                  100.0 * gbs / copy_gbs);
    };
    row("copy device->device", copy, 2.0 * bytes);
    for (auto [type, name] : {std::pair{arcoll::DataType::f32, "reduce sum f32"},
                              std::pair{arcoll::DataType::f16, "reduce sum f16"},
                              std::pair{arcoll::DataType::bf16, "reduce sum bf16"}}) {
      const std::size_t count = bytes / arcoll::size_of(type);
      row(name,
          seconds_per_call(
              [&] {
                check(arcoll::cuda::reduce(b, a, count, type, arcoll::ReduceOp::sum, stream),
                      "reduce");
              },
              iters, stream),
          3.0 * bytes);
    }
    const std::size_t floats = bytes / 4 / 2;  // f32 in, f16 out, residual in and out
    auto* in = static_cast<float*>(a);
    auto* residual = static_cast<float*>(a) + floats;
    auto* narrow = static_cast<std::uint16_t*>(b);
    row("narrow f16 + feedback",
        seconds_per_call(
            [&] {
              check(
                  arcoll::cuda::narrow(narrow, in, residual, floats, arcoll::DataType::f16, stream),
                  "narrow");
            },
            iters, stream),
        14.0 * floats);
    row("widen bf16",
        seconds_per_call(
            [&] {
              check(arcoll::cuda::widen(in, narrow, floats, arcoll::DataType::bf16, stream),
                    "widen");
            },
            iters, stream),
        6.0 * floats);
    // Pinned host <-> device: each byte crosses the bus once (traffic counted once).
    const double up = seconds_per_call(
        [&] { check(cudaMemcpyAsync(a, pinned, bytes, cudaMemcpyHostToDevice, stream), "up"); },
        iters, stream);
    const double down = seconds_per_call(
        [&] { check(cudaMemcpyAsync(pinned, a, bytes, cudaMemcpyDeviceToHost, stream), "down"); },
        iters, stream);
    std::printf("%12zu  %-22s %10.1f %10.1f\n", bytes, "pinned host->device", up * 1e6,
                bytes / up / 1e9);
    std::printf("%12zu  %-22s %10.1f %10.1f\n", bytes, "device->pinned host", down * 1e6,
                bytes / down / 1e9);
  }
  cudaFreeHost(pinned);
  cudaFree(a);
  cudaFree(b);
  return 0;
}
