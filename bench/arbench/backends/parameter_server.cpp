// `--algo ps`: the all-reduce of sum as a parameter server's bsp push_pull (each buffer size a
// key), on the workers' ranks, its servers a share in every worker or `--ps-servers K` ranks
// of their own.
#include <map>
#include <utility>

#include "arbench/backends/backend.hpp"
#include "arcoll/parameter_server.hpp"

namespace arbench {

arcoll::ParameterServerOptions sweep_parameter_server_options(const arcoll::Communicator& job,
                                                              int dedicated,
                                                              std::size_t piece_bytes) {
  arcoll::ParameterServerOptions options;
  options.piece_bytes = piece_bytes;
  for (int s = 0; s < dedicated; ++s) options.server_ranks.push_back(job.size() - dedicated + s);
  return options;
}

namespace {

class ParameterServerBackend final : public Backend {
 public:
  ParameterServerBackend(arcoll::Communicator& workers, arcoll::Communicator& job, int dedicated,
                         std::size_t piece_bytes)
      : workers_(workers),
        dedicated_(dedicated),
        piece_bytes_(piece_bytes),
        server_(job, sweep_parameter_server_options(job, dedicated, piece_bytes)) {}
  ~ParameterServerBackend() override {
    try {
      server_.finish();
    } catch (...) {
    }
  }
  std::string name() const override { return "arcoll/ps"; }
  bool is_arcoll() const override { return true; }
  std::string description() const override {
    return "arcoll parameter server, bsp push_pull, " +
           (dedicated_ > 0 ? std::to_string(dedicated_) + " dedicated server rank(s)"
                           : std::string("a server share in every worker")) +
           ", pieces of " + std::to_string(piece_bytes_) + " B";
  }
  std::optional<std::string> unsupported(Coll coll, arcoll::DataType,
                                         arcoll::ReduceOp op) const override {
    if (coll != Coll::allreduce) return "a parameter server pushes and pulls: all-reduce only";
    if (op != arcoll::ReduceOp::sum) return "a parameter server sums";
    return std::nullopt;
  }
  void run(const Call& c) override {
    // Every worker meets a size in the same order: it registers the key the first time.
    const auto id = std::make_pair(c.count, c.type);
    auto it = keys_.find(id);
    if (it == keys_.end()) {
      it = keys_.emplace(id, keys_.size() + 1).first;
      server_.register_tensor(it->second, c.count, c.type);
    }
    server_.push_pull(it->second, c.send, c.recv);
  }
  void barrier() override { workers_.barrier(); }

 private:
  arcoll::Communicator& workers_;
  int dedicated_;
  std::size_t piece_bytes_;
  arcoll::ParameterServer server_;
  std::map<std::pair<std::size_t, arcoll::DataType>, std::uint64_t> keys_;
};

}  // namespace

std::unique_ptr<Backend> make_parameter_server_backend(arcoll::Communicator& workers,
                                                       arcoll::Communicator& job, int dedicated,
                                                       std::size_t piece_bytes) {
  return std::make_unique<ParameterServerBackend>(workers, job, dedicated, piece_bytes);
}

}  // namespace arbench
