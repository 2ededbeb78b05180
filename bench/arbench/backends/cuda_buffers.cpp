// --device cuda: arcoll's calls on GPU memory. Each rank takes the GPU of its local rank
// (modulo the GPUs there, so several ranks may share one); the sweep's host inputs are copied
// to two device buffers before the timed calls and the result back before the check, as the
// nccl backend does, and the calls get device pointers, which the library stages through
// pinned host memory (src/core/device_staging.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "arbench/backends/backend.hpp"
#include "arbench/backends/gpu_check.hpp"

namespace arbench {
namespace {

class CudaBuffers final : public Backend {
 public:
  CudaBuffers(std::unique_ptr<Backend> host, arcoll::Communicator& comm)
      : host_(std::move(host)), rank_(comm.rank()) {
    if (auto why = missing_gpu(comm)) throw BackendUnavailable(*why);
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "--device cuda: cudaGetDeviceCount");
    const int local = comm.local_rank() >= 0 ? comm.local_rank() : comm.rank();
    check_cuda(cudaSetDevice(local % devices), "--device cuda: cudaSetDevice");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, local % devices) == cudaSuccess) gpu_ = prop.name;
  }
  ~CudaBuffers() override {
    cudaFree(send_);
    cudaFree(recv_);
  }

  std::string name() const override { return host_->name(); }
  std::string description() const override { return host_->description() + ", buffers on " + gpu_; }
  std::optional<std::string> unsupported(Coll coll, arcoll::DataType type,
                                         arcoll::ReduceOp op) const override {
    return host_->unsupported(coll, type, op);
  }
  bool reduces() const override { return host_->reduces(); }
  bool is_arcoll() const override { return host_->is_arcoll(); }
  double bus_factor(Coll coll, int world_size) const override {
    return host_->bus_factor(coll, world_size);
  }
  void barrier() override { host_->barrier(); }

  // The sweep's buffers are `bytes` each. In place, one holds the other (its pointer lies in
  // the first `bytes` of the other): only that one is copied, and the call's pointers map into it.
  void stage_in(const void* send, void* recv, std::size_t bytes) override {
    if (bytes > capacity_) {
      cudaFree(std::exchange(send_, nullptr));
      cudaFree(std::exchange(recv_, nullptr));
      check_cuda(cudaMalloc(&send_, bytes), "--device cuda: cudaMalloc");
      check_cuda(cudaMalloc(&recv_, bytes), "--device cuda: cudaMalloc");
      capacity_ = bytes;
    }
    const auto* s = static_cast<const char*>(send);
    const auto* r = static_cast<const char*>(recv);
    bytes_ = bytes;
    host_send_ = within(s, r) ? nullptr : s;
    host_recv_ = host_send_ != nullptr && within(r, s) ? nullptr : r;
    if (host_send_ != nullptr)
      check_cuda(cudaMemcpy(send_, send, bytes, cudaMemcpyHostToDevice),
                 "--device cuda: cudaMemcpy to the GPU");
    if (host_recv_ != nullptr)
      check_cuda(cudaMemcpy(recv_, recv, bytes, cudaMemcpyHostToDevice),
                 "--device cuda: cudaMemcpy to the GPU");
  }
  void stage_out(void* recv, std::size_t bytes) override {
    // Inside the send buffer (in place), no further than its end.
    const auto [device, room] = on_gpu(recv);
    check_cuda(cudaMemcpy(recv, device, std::min(bytes, room), cudaMemcpyDeviceToHost),
               "--device cuda: cudaMemcpy to the host");
  }
  void run(const Call& call) override {
    Call on_device = call;
    on_device.send = on_gpu(call.send).first;
    on_device.recv = on_gpu(call.recv).first;
    // arcoll broadcasts one buffer: out of place, the root copies its input there first, on
    // the GPU (the host backend's copy would read device memory).
    if (call.coll == Coll::broadcast && call.send != call.recv) {
      if (rank_ == call.root)
        check_cuda(cudaMemcpy(on_device.recv, on_device.send,
                              call.count * arcoll::size_of(call.type), cudaMemcpyDeviceToDevice),
                   "--device cuda: cudaMemcpy on the GPU");
      on_device.send = on_device.recv;
    }
    host_->run(on_device);
  }

 private:
  bool within(const char* at, const char* buffer) const {
    return at >= buffer && at < buffer + std::max<std::size_t>(bytes_, 1);
  }
  // Where a host address of the staged buffers lies on the GPU, and the bytes from there to
  // the end of its buffer.
  std::pair<char*, std::size_t> on_gpu(const void* host) const {
    const auto* at = static_cast<const char*>(host);
    for (auto [staged, device] : {std::pair{host_send_, send_}, std::pair{host_recv_, recv_}})
      if (staged != nullptr && within(at, staged))
        return {static_cast<char*>(device) + (at - staged), bytes_ - (at - staged)};
    throw std::runtime_error("--device cuda: a call's buffer was not staged to the GPU");
  }

  std::unique_ptr<Backend> host_;
  int rank_;
  std::string gpu_ = "a GPU";
  void* send_ = nullptr;
  void* recv_ = nullptr;
  std::size_t capacity_ = 0, bytes_ = 0;
  const char* host_send_ = nullptr;
  const char* host_recv_ = nullptr;
};

const DeviceRegistrar kCudaDevice{
    {"cuda", [](std::unique_ptr<Backend> host, arcoll::Communicator& comm) {
       return std::unique_ptr<Backend>(std::make_unique<CudaBuffers>(std::move(host), comm));
     }}};

}  // namespace
}  // namespace arbench
