// Gloo over its TCP transport: the classic allreduce algorithms (ring, ring_chunked,
// halving_doubling, bcube) and the collectives of its newer interface (allgather, broadcast,
// reduce, alltoall, gather, scatter; Gloo has no reduce-scatter of this kind and no sendrecv
// collective). Ranks meet through a gloo::rendezvous::FileStore in a fresh directory that
// rank 0 creates under TMPDIR (or /tmp) and broadcasts through arcoll; it is removed once the
// full mesh is connected, so it must be visible to every rank (one host, or a shared TMPDIR).
//
// Gloo's allreduce works in place: the out-of-place form copies send to recv first, inside
// the timed call; its other collectives work out of place: their in-place form copies the
// input aside first. avg runs as sum followed by a local division by the world size. bf16
// has no Gloo type and is skipped; f16 uses gloo::float16.
#include <unistd.h>

#include <gloo/algorithm.h>
#include <gloo/allgather.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

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

// Calls f.template operator()<T>() with T Gloo's type for `type` (bf16 has none).
template <typename F>
decltype(auto) with_gloo_type(DataType type, F&& f) {
  switch (type) {
    case DataType::f32:
      return f.template operator()<float>();
    case DataType::f64:
      return f.template operator()<double>();
    case DataType::f16:
      return f.template operator()<gloo::float16>();
    case DataType::i8:
      return f.template operator()<std::int8_t>();
    case DataType::u8:
      return f.template operator()<std::uint8_t>();
    case DataType::i32:
      return f.template operator()<std::int32_t>();
    case DataType::i64:
      return f.template operator()<std::int64_t>();
    case DataType::bf16:
      break;
  }
  throw std::runtime_error("gloo backend: no bf16");
}

template <typename T>
gloo::ReduceOptions::Func reduce_function(ReduceOp op) {
  using Fn = void (*)(void*, const void*, const void*, std::size_t);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return static_cast<Fn>(&gloo::sum<T>);
    case ReduceOp::prod:
      return static_cast<Fn>(&gloo::product<T>);
    case ReduceOp::min:
      return static_cast<Fn>(&gloo::min<T>);
    case ReduceOp::max:
      return static_cast<Fn>(&gloo::max<T>);
  }
  return nullptr;
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
           " over tcp (allreduce in place, out of place copies send to recv first; the other "
           "collectives' in-place forms copy the input aside first)";
  }
  std::optional<std::string> unsupported(Coll coll, DataType type, ReduceOp) const override {
    if (type == DataType::bf16) return std::string("Gloo has no bf16 type");
    if (coll == Coll::reduce_scatter || coll == Coll::sendrecv)
      return "Gloo has no " + std::string(to_string(coll)) + " of this kind";
    return std::nullopt;
  }
  void run(const Call& c) override {
    if (c.coll == Coll::allreduce) return allreduce(c.send, c.recv, c.count, c.type, c.op);
    with_gloo_type(c.type, [&]<typename T>() { run_typed<T>(c); });
  }
  void barrier() override { barrier_->run(); }

 private:
  // The newer interface's collectives, out of place: an in-place call's input is copied aside
  // first.
  template <typename T>
  void run_typed(const Call& c) {
    const std::size_t elements = c.count;
    if (elements == 0) return;  // Gloo divides by the bytes to move
    const std::size_t bytes = elements * sizeof(T);
    const std::size_t whole = elements * static_cast<std::size_t>(size_);
    const int rank = context_->rank;
    const bool root = rank == c.root;
    auto* recv = static_cast<T*>(c.recv);
    const auto* recv_bytes = static_cast<const char*>(c.recv);
    auto input = [&](const void* send, std::size_t n) {
      const auto* from = static_cast<const char*>(send);
      const bool aliased = n != 0 && from >= recv_bytes && from < recv_bytes + whole * sizeof(T);
      return aliased ? input_copy<T>(send, n) : static_cast<T*>(const_cast<void*>(send));
    };
    switch (c.coll) {
      case Coll::allgather: {
        gloo::AllgatherOptions o(context_);
        o.setInput(input(c.send, elements), elements);
        o.setOutput(recv, whole);
        gloo::allgather(o);
        break;
      }
      case Coll::broadcast: {
        gloo::BroadcastOptions o(context_);
        if (root && c.send != c.recv)
          o.setInput(static_cast<T*>(const_cast<void*>(c.send)), elements);
        o.setOutput(recv, elements);
        o.setRoot(c.root);
        gloo::broadcast(o);
        break;
      }
      case Coll::reduce: {
        gloo::ReduceOptions o(context_);
        o.setInput(input(c.send, elements), elements);
        o.setOutput(root ? recv : output_aside<T>(elements), elements);
        o.setRoot(c.root);
        o.setReduceFunction(reduce_function<T>(c.op));
        gloo::reduce(o);
        if (c.op == ReduceOp::avg && root) divide_by_ranks(recv, elements, c.type, size_);
        break;
      }
      case Coll::alltoall: {
        gloo::AlltoallOptions o(context_);
        o.setInput(input(c.send, whole), whole);
        o.setOutput(recv, whole);
        gloo::alltoall(o);
        break;
      }
      case Coll::gather: {
        gloo::GatherOptions o(context_);
        o.setInput(input(c.send, elements), elements);
        if (root) o.setOutput(recv, whole);
        o.setRoot(c.root);
        gloo::gather(o);
        break;
      }
      case Coll::scatter: {
        gloo::ScatterOptions o(context_);
        std::vector<T*> blocks;
        if (root) {
          // In place, the root's own block stays where it is: the blocks go from a copy.
          const auto* send_bytes = static_cast<const char*>(c.send);
          T* source = recv_bytes == send_bytes + static_cast<std::size_t>(rank) * bytes
                          ? input_copy<T>(c.send, whole)
                          : static_cast<T*>(const_cast<void*>(c.send));
          for (int r = 0; r < size_; ++r)
            blocks.push_back(source + static_cast<std::size_t>(r) * elements);
          o.setInputs(blocks, elements);
        }
        o.setOutput(recv, elements);
        o.setRoot(c.root);
        gloo::scatter(o);
        break;
      }
      default:
        throw std::runtime_error("gloo backend: no " + std::string(to_string(c.coll)));
    }
  }
  template <typename T>
  T* input_copy(const void* send, std::size_t n) {
    aside_.resize(n * sizeof(T));
    std::memcpy(aside_.data(), send, n * sizeof(T));
    return reinterpret_cast<T*>(aside_.data());
  }
  template <typename T>
  T* output_aside(std::size_t n) {
    output_aside_.resize(n * sizeof(T));
    return reinterpret_cast<T*>(output_aside_.data());
  }
  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
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
    if (op == ReduceOp::avg) divide_by_ranks(recv, count, type, size_);
  }

  std::string algorithm_;
  int size_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::BarrierAllToAll> barrier_;
  // Gloo's algorithms are bound to one buffer and count: the last one is kept, since the sweep
  // repeats the same call.
  std::unique_ptr<gloo::Algorithm> cached_;
  std::tuple<void*, std::size_t, DataType, ReduceOp> key_{};
  std::vector<char> aside_;         // an in-place call's input, copied aside
  std::vector<char> output_aside_;  // reduce's output on ranks other than the root
};

}  // namespace

const BackendRegistrar kGlooRegistration{
    {"gloo", false, [](arcoll::Communicator& comm, const BackendOptions& options) {
       return std::unique_ptr<Backend>(std::make_unique<GlooBackend>(comm, options));
     }}};

}  // namespace arbench
