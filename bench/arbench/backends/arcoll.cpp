// arcoll's own Communicator: what arbench measures by default.
#include "arbench/backends/backend.hpp"

#include <cstring>

namespace arbench {
namespace {

class ArcollBackend final : public Backend {
 public:
  ArcollBackend(arcoll::Communicator& comm, std::string algorithm)
      : comm_(comm), algorithm_(std::move(algorithm)) {}
  // Over a communicator of its own, with other settings.
  explicit ArcollBackend(std::unique_ptr<arcoll::Communicator> own)
      : own_(std::move(own)), comm_(*own_) {}

  std::string name() const override {
    if (own_) return kArcollOver + comm_.options().transport;
    return algorithm_.empty() ? "arcoll" : "arcoll/" + algorithm_;
  }
  bool is_arcoll() const override { return true; }
  std::optional<std::string> unsupported(Coll coll, arcoll::DataType,
                                         arcoll::ReduceOp) const override {
    if (coll == Coll::sendrecv && comm_.size() < 2)
      return "sendrecv passes to the next rank: one rank has none";
    return std::nullopt;
  }
  std::string description() const override {
    return "arcoll " + (algorithm_.empty() ? comm_.algorithm_name() : algorithm_) + " over " +
           comm_.transport_name();
  }
  void run(const Call& c) override {
    if (!algorithm_.empty() && comm_.options().algorithm != algorithm_)
      comm_.set_algorithm(algorithm_);
    const std::size_t bytes = c.count * arcoll::size_of(c.type);
    switch (c.coll) {
      case Coll::allreduce:
        return comm_.allreduce(c.send, c.recv, c.count, c.type, c.op);
      case Coll::allgather:
        return comm_.allgather(c.send, c.recv, c.count, c.type);
      case Coll::reduce_scatter:
        return comm_.reduce_scatter(c.send, c.recv, c.count, c.type, c.op);
      case Coll::broadcast:
        // arcoll broadcasts one buffer: out of place, the root copies its input there first.
        if (c.send != c.recv && comm_.rank() == c.root && bytes != 0)
          std::memcpy(c.recv, c.send, bytes);
        return comm_.broadcast(c.recv, c.count, c.type, c.root);
      case Coll::reduce:
        return comm_.reduce(c.send, c.recv, c.count, c.type, c.op, c.root);
      case Coll::alltoall:
        return comm_.alltoall(c.send, c.recv, c.count, c.type);
      case Coll::gather:
        return comm_.gather(c.send, c.recv, c.count, c.type, c.root);
      case Coll::scatter:
        return comm_.scatter(c.send, c.recv, c.count, c.type, c.root);
      case Coll::sendrecv: {
        const int n = comm_.size(), rank = comm_.rank();
        return comm_.sendrecv(c.send, bytes, (rank + 1) % n, c.recv, bytes, (rank + n - 1) % n);
      }
    }
  }
  void barrier() override { comm_.barrier(); }

 private:
  std::unique_ptr<arcoll::Communicator> own_;
  arcoll::Communicator& comm_;
  std::string algorithm_;  // empty: whatever the communicator was created with
};

}  // namespace

std::unique_ptr<Backend> make_arcoll_backend(arcoll::Communicator& comm,
                                             const std::string& algorithm) {
  return std::make_unique<ArcollBackend>(comm, algorithm);
}

std::unique_ptr<Backend> make_arcoll_backend_over(arcoll::Communicator& comm,
                                                  const arcoll::Options& options,
                                                  arcoll::Calibration calibration) {
  std::unique_ptr<arcoll::Communicator> over = comm.duplicate(options);
  // Else its cost model prices its transport on the built-in figures (auto took the ring over
  // UCX between emulated hosts, where the calibrated model takes hierarchical).
  arcoll::use_calibrated_link_costs(*over, calibration);
  return std::make_unique<ArcollBackend>(std::move(over));
}

const BackendRegistrar kArcollRegistration{
    {"arcoll", false,
     [](arcoll::Communicator& comm, const BackendOptions&) { return make_arcoll_backend(comm); }}};

}  // namespace arbench
