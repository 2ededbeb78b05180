// ncclAllReduce on the GPUs of this host, one GPU per rank (local rank modulo the GPU count).
// Inputs are copied to device buffers before the timed iterations and the result back before
// the check; the timed calls run on device memory and wait for the stream, as nccl-tests do.
// Without a usable GPU the backend is unavailable (skipped, exit code 0). The CUDA runtime is
// linked statically and loads the driver only when called, so arbench starts on machines
// without one.
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "arbench/backends/backend.hpp"
#include "arbench/backends/gpu_check.hpp"
#include "arbench/backends/hang_watch.hpp"

namespace arbench {
namespace {

using arcoll::DataType;
using arcoll::ReduceOp;

void check_nccl(ncclResult_t code, const char* what) {
  if (code != ncclSuccess)
    throw std::runtime_error(std::string("nccl backend: ") + what +
                             " failed: " + ncclGetErrorString(code));
}

ncclDataType_t nccl_type(DataType type) {
  switch (type) {
    case DataType::f32:
      return ncclFloat32;
    case DataType::f64:
      return ncclFloat64;
    case DataType::f16:
      return ncclFloat16;
    case DataType::bf16:
      return ncclBfloat16;
    case DataType::i8:
      return ncclInt8;
    case DataType::u8:
      return ncclUint8;
    case DataType::i32:
      return ncclInt32;
    case DataType::i64:
      return ncclInt64;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::prod:
      return ncclProd;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::avg:
      return ncclAvg;
  }
  return ncclSum;
}

class NcclBackend final : public Backend {
 public:
  explicit NcclBackend(arcoll::Communicator& comm) : watch_("NCCL", comm) {
    // Every rank skips when one of them cannot run.
    if (auto why = missing_gpu(comm)) throw BackendUnavailable(*why);
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "nccl backend: cudaGetDeviceCount");

    const int local = comm.local_rank() >= 0 ? comm.local_rank() : comm.rank();
    device_ = local % devices;
    check_cuda(cudaSetDevice(device_), "nccl backend: cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
               "nccl backend: cudaStreamCreate");
    ncclUniqueId id{};
    if (comm.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    comm.broadcast(&id, sizeof id, DataType::u8, 0);
    check_nccl(ncclCommInitRank(&nccl_, comm.size(), id, comm.rank()), "ncclCommInitRank");
    int version = 0;
    ncclGetVersion(&version);
    version_ = std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
               std::to_string(version % 100);
    check_cuda(cudaMalloc(&token_, sizeof(float)), "nccl backend: cudaMalloc");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device_) == cudaSuccess) gpu_ = prop.name;
  }
  ~NcclBackend() override {
    if (nccl_ != nullptr) ncclCommDestroy(nccl_);
    if (send_ != nullptr) cudaFree(send_);
    if (recv_ != nullptr) cudaFree(recv_);
    if (token_ != nullptr) cudaFree(token_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "nccl"; }
  std::string description() const override {
    return "ncclAllReduce (NCCL " + version_ + ") on " + gpu_;
  }
  void stage_in(const void* send, void* recv, std::size_t bytes) override {
    reserve(bytes);
    host_send_ = send;
    host_recv_ = recv;
    check_cuda(cudaMemcpy(send == recv ? recv_ : send_, send, bytes, cudaMemcpyHostToDevice),
               "nccl backend: cudaMemcpy to the GPU");
  }
  void stage_out(void* recv, std::size_t bytes) override {
    check_cuda(cudaMemcpy(recv, recv_, bytes, cudaMemcpyDeviceToHost),
               "nccl backend: cudaMemcpy to the host");
  }
  // Its staging (one buffer each way, the same size) fits the all-reduce only so far.
  std::optional<std::string> unsupported(Coll coll, DataType, ReduceOp) const override {
    if (coll != Coll::allreduce)
      return "arbench's nccl backend measures allreduce only (staging of " +
             std::string(to_string(coll)) + "'s buffers to the GPU is not written yet)";
    return std::nullopt;
  }
  void run(const Call& c) override {
    if (c.recv != host_recv_ || (c.send != c.recv && c.send != host_send_))
      throw std::runtime_error("nccl backend: buffers were not staged");
    reserve(c.count * arcoll::size_of(c.type));
    const void* source = c.send == c.recv ? recv_ : send_;
    // Watched to the end of the stream's work: a stopped peer leaves it waiting without end.
    const auto watched = watch_.watching("ncclAllReduce", c.count * arcoll::size_of(c.type));
    check_nccl(
        ncclAllReduce(source, recv_, c.count, nccl_type(c.type), nccl_op(c.op), nccl_, stream_),
        "ncclAllReduce");
    check_cuda(cudaStreamSynchronize(stream_), "nccl backend: cudaStreamSynchronize");
  }
  void barrier() override {
    // A one-element allreduce: NCCL has no barrier.
    const auto watched = watch_.watching("ncclAllReduce (barrier)", sizeof(float));
    check_nccl(ncclAllReduce(token_, token_, 1, ncclFloat32, ncclSum, nccl_, stream_),
               "ncclAllReduce (barrier)");
    check_cuda(cudaStreamSynchronize(stream_), "nccl backend: cudaStreamSynchronize");
  }

 private:
  void reserve(std::size_t bytes) {
    if (bytes <= capacity_) return;
    if (send_ != nullptr) cudaFree(send_);
    if (recv_ != nullptr) cudaFree(recv_);
    send_ = recv_ = nullptr;
    check_cuda(cudaMalloc(&send_, bytes), "nccl backend: cudaMalloc");
    check_cuda(cudaMalloc(&recv_, bytes), "nccl backend: cudaMalloc");
    capacity_ = bytes;
  }

  HangWatch watch_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  void* token_ = nullptr;  // the barrier's element
  std::size_t capacity_ = 0;
  const void* host_send_ = nullptr;
  const void* host_recv_ = nullptr;
  std::string version_;
  std::string gpu_ = "GPU";
};

}  // namespace

const BackendRegistrar kNcclRegistration{
    {"nccl", false, [](arcoll::Communicator& comm, const BackendOptions&) {
       return std::unique_ptr<Backend>(std::make_unique<NcclBackend>(comm));
     }}};

}  // namespace arbench
