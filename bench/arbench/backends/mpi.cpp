// The collectives of the MPI library arbench was built with (Open MPI here): MPI_Allreduce,
// MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast, MPI_Reduce, MPI_Alltoall, MPI_Gather,
// MPI_Scatter and MPI_Sendrecv. The ranks are those of mpirun; arcoll's communicator runs in
// the same processes (it bootstraps through MPI). In-place calls take MPI_IN_PLACE; MPI's
// in-place reduce-scatter leaves the block at the start of the buffer, so it is moved to the
// rank's block inside the timed call.
//
// avg: MPI has no average, so it runs as MPI_SUM followed by a local division by the world
// size, inside the timed call (what a framework on MPI does). f16 and bf16 have no MPI type
// and are skipped.
#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "arbench/backends/backend.hpp"
#include "arbench/backends/hang_watch.hpp"

namespace arbench {
namespace {

using arcoll::DataType;
using arcoll::ReduceOp;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string("mpi backend: ") + what + " failed: " + text);
}

MPI_Datatype mpi_type(DataType type) {
  switch (type) {
    case DataType::f32:
      return MPI_FLOAT;
    case DataType::f64:
      return MPI_DOUBLE;
    case DataType::i8:
      return MPI_INT8_T;
    case DataType::u8:
      return MPI_UINT8_T;
    case DataType::i32:
      return MPI_INT32_T;
    case DataType::i64:
      return MPI_INT64_T;
    case DataType::f16:
    case DataType::bf16:
      break;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::prod:
      return MPI_PROD;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  return MPI_OP_NULL;
}

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(arcoll::Communicator& comm) : watch_("MPI", comm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {  // arcoll initializes MPI only when it bootstraps through it
      check(MPI_Init(nullptr, nullptr), "MPI_Init");
      std::atexit(finalize_at_exit);
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    MPI_Comm_size(comm_, &size_);
    if (rank != comm.rank() || size_ != comm.size())
      throw std::runtime_error("mpi backend: MPI rank " + std::to_string(rank) + " of " +
                               std::to_string(size_) + " is arcoll rank " +
                               std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
                               "; run arbench under mpirun (it re-executes itself there when "
                               "started without a launcher)");
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    library_ = std::string(version, static_cast<std::size_t>(length));
    if (auto end = library_.find_first_of(",\n"); end != std::string::npos) library_.resize(end);
  }
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  std::string name() const override { return "mpi"; }
  std::string description() const override {
    // mpirun hands its --mca settings to the ranks as OMPI_MCA_* variables. A pml other than
    // ob1 (ucx) carries the messages itself, and the btl goes unused.
    const char* pml = std::getenv("OMPI_MCA_pml");
    const char* btl = std::getenv("OMPI_MCA_btl");
    std::string path;
    if (pml != nullptr && std::string_view(pml) != "ob1")
      path = std::string(", pml ") + pml;
    else if (btl != nullptr)
      path = std::string(", btl ") + btl;
    return "MPI's collectives (" + library_ + path + "); avg = MPI_SUM then divide";
  }
  std::optional<std::string> unsupported(Coll, DataType type, ReduceOp) const override {
    if (mpi_type(type) == MPI_DATATYPE_NULL)
      return std::string("MPI has no ") + std::string(arcoll::to_string(type)) + " type";
    return std::nullopt;
  }
  void run(const Call& c) override {
    if (c.coll == Coll::allreduce) return allreduce(c);
    if (c.count > static_cast<std::size_t>(INT_MAX))
      throw std::runtime_error("mpi backend: more than INT_MAX elements in one call");
    const int n = static_cast<int>(c.count);
    const MPI_Datatype type = mpi_type(c.type);
    const std::size_t bytes = c.count * arcoll::size_of(c.type);
    int rank = 0;
    MPI_Comm_rank(comm_, &rank);
    auto at = [&](const void* base, int block) {
      return static_cast<const std::byte*>(base) + static_cast<std::size_t>(block) * bytes;
    };
    switch (c.coll) {
      case Coll::allreduce:
        break;
      case Coll::allgather: {
        const bool in_place = c.send == at(c.recv, rank);
        call("MPI_Allgather", bytes, [&] {
          return MPI_Allgather(in_place ? MPI_IN_PLACE : c.send, n, type, c.recv, n, type, comm_);
        });
        break;
      }
      case Coll::reduce_scatter: {
        if (c.recv == at(c.send, rank)) {
          auto* buffer = const_cast<void*>(c.send);
          call("MPI_Reduce_scatter_block", bytes, [&] {
            return MPI_Reduce_scatter_block(MPI_IN_PLACE, buffer, n, type, mpi_op(c.op), comm_);
          });
          if (rank != 0 && bytes != 0) std::memmove(c.recv, buffer, bytes);
        } else {
          call("MPI_Reduce_scatter_block", bytes, [&] {
            return MPI_Reduce_scatter_block(c.send, c.recv, n, type, mpi_op(c.op), comm_);
          });
        }
        if (c.op == ReduceOp::avg) divide_by_ranks(c.recv, c.count, c.type, size_);
        break;
      }
      case Coll::broadcast:
        if (c.send != c.recv && rank == c.root && bytes != 0) std::memcpy(c.recv, c.send, bytes);
        call("MPI_Bcast", bytes, [&] { return MPI_Bcast(c.recv, n, type, c.root, comm_); });
        break;
      case Coll::reduce: {
        const bool in_place = rank == c.root && c.send == c.recv;
        call("MPI_Reduce", bytes, [&] {
          return MPI_Reduce(in_place ? MPI_IN_PLACE : c.send, c.recv, n, type, mpi_op(c.op), c.root,
                            comm_);
        });
        if (c.op == ReduceOp::avg && rank == c.root)
          divide_by_ranks(c.recv, c.count, c.type, size_);
        break;
      }
      case Coll::alltoall:
        call("MPI_Alltoall", bytes, [&] {
          return MPI_Alltoall(c.send == c.recv ? MPI_IN_PLACE : c.send, n, type, c.recv, n, type,
                              comm_);
        });
        break;
      case Coll::gather: {
        const bool in_place = rank == c.root && c.send == at(c.recv, rank);
        call("MPI_Gather", bytes, [&] {
          return MPI_Gather(in_place ? MPI_IN_PLACE : c.send, n, type, c.recv, n, type, c.root,
                            comm_);
        });
        break;
      }
      case Coll::scatter: {
        const bool in_place = rank == c.root && c.recv == at(c.send, rank);
        call("MPI_Scatter", bytes, [&] {
          return MPI_Scatter(c.send, n, type, in_place ? MPI_IN_PLACE : c.recv, n, type, c.root,
                             comm_);
        });
        break;
      }
      case Coll::sendrecv: {
        const int next = (rank + 1) % size_, previous = (rank + size_ - 1) % size_;
        if (c.send == c.recv)
          call("MPI_Sendrecv_replace", bytes, [&] {
            return MPI_Sendrecv_replace(c.recv, n, type, next, 0, previous, 0, comm_,
                                        MPI_STATUS_IGNORE);
          });
        else
          call("MPI_Sendrecv", bytes, [&] {
            return MPI_Sendrecv(c.send, n, type, next, 0, c.recv, n, type, previous, 0, comm_,
                                MPI_STATUS_IGNORE);
          });
        break;
      }
    }
  }
  void barrier() override {
    call("MPI_Barrier", 0, [&] { return MPI_Barrier(comm_); });
  }

 private:
  void allreduce(const Call& c) {
    const void* source = c.send == c.recv ? MPI_IN_PLACE : c.send;
    // MPI counts are int: large buffers go in pieces.
    constexpr std::size_t kMaxCount = 1u << 30;
    const std::size_t element = arcoll::size_of(c.type);
    for (std::size_t done = 0; done < c.count || (c.count == 0 && done == 0);) {
      const std::size_t n = std::min(c.count - done, kMaxCount);
      const void* s = source == MPI_IN_PLACE
                          ? MPI_IN_PLACE
                          : static_cast<const std::byte*>(c.send) + done * element;
      call("MPI_Allreduce", n * arcoll::size_of(c.type), [&] {
        return MPI_Allreduce(s, static_cast<std::byte*>(c.recv) + done * element,
                             static_cast<int>(n), mpi_type(c.type), mpi_op(c.op), comm_);
      });
      done += n;
      if (n == 0) break;
    }
    if (c.op == ReduceOp::avg) divide_by_ranks(c.recv, c.count, c.type, size_);
  }

  // One MPI call, watched: MPI waits for a stopped peer without end.
  template <class Function>
  void call(const char* function, std::size_t bytes, Function&& mpi) {
    const auto watched = watch_.watching(function, bytes);
    check(mpi(), function);
  }

  HangWatch watch_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  std::string library_;
};

}  // namespace

// MPI's ranks must be started by mpirun: arbench re-runs itself under it.
const BackendRegistrar kMpiRegistration{
    {"mpi", true, [](arcoll::Communicator& comm, const BackendOptions&) {
       return std::unique_ptr<Backend>(std::make_unique<MpiBackend>(comm));
     }}};

}  // namespace arbench
