// Gloo's classic allreduce algorithms (ring, ring_chunked, halving_doubling, bcube) over its
// TCP transport. Ranks meet through a gloo::rendezvous::FileStore in a fresh directory that
// rank 0 creates under TMPDIR (or /tmp) and broadcasts through arcoll; it is removed once the
// full mesh is connected, so it must be visible to every rank (one host, or a shared TMPDIR).
//
// Gloo's algorithms work in place: the out-of-place form copies send to recv first, inside
// the timed call. avg runs as sum followed by a local division by the world size. bf16 has no
// Gloo type and is skipped; f16 uses gloo::float16.
#include <unistd.h>

#include <gloo/algorithm.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/config.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>

#include "arbench/backends/backend.hpp"

namespace arbench {
namespace {

using arcoll::DataType;
using arcoll::ReduceOp;

template <typename T>
const gloo::ReductionFunction<T>* reduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return gloo::ReductionFunction<T>::sum;
    case ReduceOp::prod:
      return gloo::ReductionFunction<T>::product;
    case ReduceOp::min:
      return gloo::ReductionFunction<T>::min;
    case ReduceOp::max:
      return gloo::ReductionFunction<T>::max;
  }
  return nullptr;
}

template <typename T>
std::unique_ptr<gloo::Algorithm> make_algorithm(const std::string& name,
                                                const std::shared_ptr<gloo::Context>& context,
                                                void* buffer, int count, ReduceOp op) {
  const std::vector<T*> ptrs = {static_cast<T*>(buffer)};
  const gloo::ReductionFunction<T>* fn = reduction<T>(op);
  if (name == "ring") return std::make_unique<gloo::AllreduceRing<T>>(context, ptrs, count, fn);
  if (name == "ring_chunked")
    return std::make_unique<gloo::AllreduceRingChunked<T>>(context, ptrs, count, fn);
  if (name == "halving_doubling")
    return std::make_unique<gloo::AllreduceHalvingDoubling<T>>(context, ptrs, count, fn);
  return std::make_unique<gloo::AllreduceBcube<T>>(context, ptrs, count, fn);
}

template <typename T>
void divide(void* buffer, std::size_t count, int n) {
  T* p = static_cast<T*>(buffer);
  for (std::size_t i = 0; i < count; ++i) p[i] /= static_cast<T>(n);
}

void divide_half(void* buffer, std::size_t count, int n) {
  auto* p = static_cast<std::uint16_t*>(buffer);
  for (std::size_t i = 0; i < count; ++i)
    p[i] = arcoll::float_to_half(arcoll::half_to_float(p[i]) / static_cast<float>(n));
}

class GlooBackend final : public Backend {
 public:
  GlooBackend(arcoll::Communicator& comm, const BackendOptions& options)
      : algorithm_(options.gloo_algorithm), size_(comm.size()) {
    if (std::find_if(std::begin(kGlooAlgorithms), std::end(kGlooAlgorithms),
                     [&](const char* a) { return algorithm_ == a; }) == std::end(kGlooAlgorithms))
      throw BackendUsageError("--gloo-algo: unknown algorithm '" + algorithm_ +
                              "' (known: ring, ring_chunked, halving_doubling, bcube)");

    // Rank 0 makes the rendezvous directory; everyone learns its path.
    char path[PATH_MAX] = {};
    std::int32_t failed = 0;
    if (comm.rank() == 0) {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/arbench-gloo-XXXXXX";
      if (pattern.size() < sizeof path) {
        std::memcpy(path, pattern.c_str(), pattern.size() + 1);
        if (::mkdtemp(path) == nullptr) failed = 1;
      } else {
        failed = 1;
      }
    }
    comm.broadcast(&failed, 1, DataType::i32, 0);
    if (failed)
      throw std::runtime_error("gloo backend: rank 0 cannot create a temporary directory");
    comm.broadcast(path, sizeof path, DataType::u8, 0);

    gloo::transport::tcp::attr attr;
    if (comm.node_count() == 1) {
      attr.hostname = "127.0.0.1";
    } else {
      char host[256] = {};
      ::gethostname(host, sizeof host - 1);
      attr.hostname = host;
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(path);
    auto context = std::make_shared<gloo::rendezvous::Context>(comm.rank(), comm.size());
    context->setTimeout(
        std::chrono::duration_cast<std::chrono::milliseconds>(comm.options().timeout));
    std::string error;
    try {
      context->connectFullMesh(store, device);
    } catch (const std::exception& e) {
      error = e.what();
    }
    comm.barrier();  // everyone is connected (or failed): the directory can go
    if (comm.rank() == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
    if (!error.empty()) throw std::runtime_error("gloo backend: connecting the mesh: " + error);
    context_ = context;
    barrier_ = std::make_unique<gloo::BarrierAllToAll>(context_);
  }

  std::string name() const override { return "gloo"; }
  std::string description() const override {
    return "Gloo " + std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) +
           "." + std::to_string(GLOO_VERSION_PATCH) + " " + algorithm_ +
           " over tcp (in place: out-of-place copies send to recv first)";
  }
  std::optional<std::string> unsupported(DataType type, ReduceOp) const override {
    if (type == DataType::bf16) return std::string("Gloo has no bf16 type");
    return std::nullopt;
  }
  void allreduce(const void* send, void* recv, std::size_t count, DataType type,
                 ReduceOp op) override {
    if (send != recv && count > 0) std::memcpy(recv, send, count * arcoll::size_of(type));
    if (count == 0) return;
    if (count > static_cast<std::size_t>(INT_MAX))
      throw std::runtime_error("gloo backend: more than INT_MAX elements");
    const auto key = std::make_tuple(recv, count, type, op);
    if (!cached_ || key != key_) {
      cached_.reset();
      const int n = static_cast<int>(count);
      switch (type) {
        case DataType::f32:
          cached_ = make_algorithm<float>(algorithm_, context_, recv, n, op);
          break;
        case DataType::f64:
          cached_ = make_algorithm<double>(algorithm_, context_, recv, n, op);
          break;
        case DataType::f16:
          cached_ = make_algorithm<gloo::float16>(algorithm_, context_, recv, n, op);
          break;
        case DataType::i8:
          cached_ = make_algorithm<std::int8_t>(algorithm_, context_, recv, n, op);
          break;
        case DataType::u8:
          cached_ = make_algorithm<std::uint8_t>(algorithm_, context_, recv, n, op);
          break;
        case DataType::i32:
          cached_ = make_algorithm<std::int32_t>(algorithm_, context_, recv, n, op);
          break;
        case DataType::i64:
          cached_ = make_algorithm<std::int64_t>(algorithm_, context_, recv, n, op);
          break;
        case DataType::bf16:
          throw std::runtime_error("gloo backend: no bf16");
      }
      key_ = key;
    }
    cached_->run();
    if (op == ReduceOp::avg) {
      if (type == DataType::f32) divide<float>(recv, count, size_);
      if (type == DataType::f64) divide<double>(recv, count, size_);
      if (type == DataType::f16) divide_half(recv, count, size_);
    }
  }
  void barrier() override { barrier_->run(); }

 private:
  std::string algorithm_;
  int size_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::BarrierAllToAll> barrier_;
  // Gloo's algorithms are bound to one buffer and count: the last one is kept, since the sweep
  // repeats the same call.
  std::unique_ptr<gloo::Algorithm> cached_;
  std::tuple<void*, std::size_t, DataType, ReduceOp> key_{};
};

}  // namespace

const BackendRegistrar kGlooRegistration{
    {"gloo", false, [](arcoll::Communicator& comm, const BackendOptions& options) {
       return std::unique_ptr<Backend>(std::make_unique<GlooBackend>(comm, options));
     }}};

}  // namespace arbench
