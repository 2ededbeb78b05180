// ncclAllReduce on device buffers, one GPU per rank (local rank modulo the GPU count): each
// bucket is copied to its GPU buffer, reduced and copied back on one stream, in order, while
// the CPU goes on with backward. Unavailable (one line, on every rank) without a usable GPU.
#include <cuda_runtime.h>
#include <nccl.h>

#include <map>
#include <stdexcept>

#include "arbench/backends/gpu_check.hpp"
#include "exchange.hpp"

namespace arbench::train {
namespace {

void check_cuda(cudaError_t code, const char* what) {
  if (code != cudaSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(code));
}

void check_nccl(ncclResult_t code, const char* what) {
  if (code != ncclSuccess)
    throw std::runtime_error(std::string(what) + " failed: " + ncclGetErrorString(code));
}

class NcclExchange final : public GradientExchange {
 public:
  explicit NcclExchange(const ExchangeSetup& setup) {
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    const int local = setup.comm.local_rank() >= 0 ? setup.comm.local_rank() : setup.comm.rank();
    device_ = local % devices;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId id{};
    if (setup.comm.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    setup.comm.broadcast(&id, sizeof id, arcoll::DataType::u8, 0);
    check_nccl(ncclCommInitRank(&nccl_, setup.comm.size(), id, setup.comm.rank()),
               "ncclCommInitRank");
  }
  ~NcclExchange() override {
    for (auto& [host, device] : buffers_) cudaFree(device);
    if (nccl_ != nullptr) ncclCommDestroy(nccl_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  std::string description() const override { return "ncclAllReduce on device buffers"; }
  Pending start_sum(float* data, std::size_t count) override {
    return on_device(data, count, [&](float* device) {
      check_nccl(ncclAllReduce(device, device, count, ncclFloat32, ncclSum, nccl_, stream_),
                 "ncclAllReduce");
    });
  }
  void broadcast(float* data, std::size_t count, int root) override {
    on_device(data, count, [&](float* device) {
      check_nccl(ncclBroadcast(device, device, count, ncclFloat32, root, nccl_, stream_),
                 "ncclBroadcast");
    })();
  }

 private:
  // Queues on the stream: `data` to its device buffer, `collective` on that buffer, the result
  // back; the returned wait synchronises the stream.
  Pending on_device(float* data, std::size_t count, const std::function<void(float*)>& collective) {
    // The calling thread may be autograd's, whose current GPU is the model's.
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    float* device = buffer_for(data, count);
    const std::size_t bytes = count * sizeof(float);
    check_cuda(cudaMemcpyAsync(device, data, bytes, cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync to the GPU");
    collective(device);
    check_cuda(cudaMemcpyAsync(data, device, bytes, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync to the host");
    return [this] { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); };
  }
  // One device buffer per host buffer (the buckets keep theirs for the whole run).
  float* buffer_for(float* host, std::size_t count) {
    auto [it, added] = buffers_.try_emplace(host, nullptr);
    if (added)
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&it->second), count * sizeof(float)),
                 "cudaMalloc");
    return it->second;
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  std::map<float*, float*> buffers_;
};

const ExchangeRegistrar kNccl(
    {"nccl", "ncclAllReduce on the GPUs of each host", false, true,
     [](const ExchangeSetup& setup) { return arbench::missing_gpu(setup.comm); },
     [](const ExchangeSetup& setup) { return std::make_unique<NcclExchange>(setup); }});

}  // namespace
}  // namespace arbench::train
