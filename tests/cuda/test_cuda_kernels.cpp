// The CUDA kernels (src/base/cuda/kernels.hpp) against the host's (src/base/reduce.hpp), element by
// element, and the "cuda" kind of device memory: built wherever the CUDA toolkit is, skipped
// (saying so) where no GPU is.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "src/base/cuda/kernels.hpp"
#include "src/base/device_memory.hpp"
#include "src/base/reduce.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

bool have_gpu() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "no GPU here (cudaGetDeviceCount found none)"

// Device memory holding `bytes`, and the bytes back.
struct DeviceBuffer {
  explicit DeviceBuffer(const std::vector<unsigned char>& bytes) : size(bytes.size()) {
    EXPECT_EQ(cudaMalloc(&data, size + 64), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, bytes.data(), size, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data); }
  std::vector<unsigned char> read() const {
    std::vector<unsigned char> out(size);
    EXPECT_EQ(cudaMemcpy(out.data(), data, size, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  void* data = nullptr;
  std::size_t size;
};

TEST(CudaKernels, ReduceMatchesTheHostKernelsForEveryTypeOpCountAndAlignment) {
  SKIP_WITHOUT_GPU();
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps) {
      if (!is_supported(t, op)) continue;
      for (std::size_t count : {0, 1, 7, 16, 17, 1000, 65537})
        for (std::size_t skew : {0, 1}) {  // an element off 16-byte alignment: the scalar path
          const std::size_t e = size_of(t), n = count + skew;
          const auto a = make_input(t, op, 1, n, 3), b = make_input(t, op, 2, n, 3);
          std::vector<unsigned char> expected(a);
          kernels::reduce(expected.data() + skew * e, a.data() + skew * e, b.data() + skew * e,
                          count, t, op);
          DeviceBuffer into(a), from(b);
          ASSERT_EQ(cuda::reduce(static_cast<char*>(into.data) + skew * e,
                                 static_cast<char*>(from.data) + skew * e, count, t, op, nullptr),
                    cudaSuccess);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          EXPECT_EQ(into.read(), expected)
              << to_string(t) << "/" << to_string(op) << " count " << count << " skew " << skew;
        }
    }
}

TEST(CudaKernels, NarrowingWithFeedbackAndWideningMatchTheHostConversions) {
  SKIP_WITHOUT_GPU();
  const std::size_t count = 4099;
  std::vector<float> values(count), residual(count);
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = 1.0f / static_cast<float>(i + 3) - static_cast<float>(i % 7) * 1e3f;
    residual[i] = static_cast<float>(i % 5) * 1e-4f;
  }
  for (DataType wire : {DataType::f16, DataType::bf16}) {
    auto narrow = [wire](float v) {
      return wire == DataType::f16 ? float_to_half(v) : float_to_bf16(v);
    };
    auto widen = [wire](std::uint16_t b) {
      return wire == DataType::f16 ? half_to_float(b) : bf16_to_float(b);
    };
    std::vector<std::uint16_t> expected(count);
    std::vector<float> expected_residual(count), expected_wide(count);
    for (std::size_t i = 0; i < count; ++i) {
      const float v = values[i] + residual[i];
      expected[i] = narrow(v);
      expected_residual[i] = v - widen(expected[i]);
      expected_wide[i] = widen(expected[i]);
    }
    auto bytes = [](const auto& v) {
      const auto* p = reinterpret_cast<const unsigned char*>(v.data());
      return std::vector<unsigned char>(p, p + v.size() * sizeof(v[0]));
    };
    DeviceBuffer in(bytes(values)), res(bytes(residual)),
        out(std::vector<unsigned char>(count * 2)), wide(std::vector<unsigned char>(count * 4));
    ASSERT_EQ(cuda::narrow(static_cast<std::uint16_t*>(out.data), static_cast<float*>(in.data),
                           static_cast<float*>(res.data), count, wire, nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::widen(static_cast<float*>(wide.data), static_cast<std::uint16_t*>(out.data),
                          count, wire, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(out.read(), bytes(expected)) << to_string(wire);
    EXPECT_EQ(res.read(), bytes(expected_residual)) << to_string(wire);
    EXPECT_EQ(wide.read(), bytes(expected_wide)) << to_string(wire);
  }
}

TEST(CudaMemory, OwnsDeviceMemoryOnlyAndCopiesBothWays) {
  const DeviceMemoryInfo* cuda = DeviceMemoryRegistry::instance().find("cuda");
  ASSERT_NE(cuda, nullptr);
  std::vector<unsigned char> host(1000, 7);
  EXPECT_FALSE(cuda->owns(host.data()));  // on any machine, with a GPU or without
  SKIP_WITHOUT_GPU();
  void* pinned = cuda->allocate_host(1000);
  EXPECT_FALSE(cuda->owns(pinned));
  DeviceBuffer device(std::vector<unsigned char>(1000, 1));
  EXPECT_TRUE(cuda->owns(device.data));
  EXPECT_TRUE(cuda->owns(static_cast<char*>(device.data) + 999));
  EXPECT_EQ(device_memory_of(device.data), cuda);
  cuda->to_device(device.data, host.data(), 1000);
  std::memset(pinned, 0, 1000);
  cuda->to_host(pinned, device.data, 1000);
  EXPECT_EQ(std::memcmp(pinned, host.data(), 1000), 0);
  cuda->free_host(pinned);
}

}  // namespace
}  // namespace arcoll::testing
