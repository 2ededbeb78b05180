// arcoll's own Communicator: what arbench measures by default.
#include "arbench/backends/backend.hpp"

namespace arbench {
namespace {

class ArcollBackend final : public Backend {
 public:
  ArcollBackend(arcoll::Communicator& comm, std::string algorithm)
      : comm_(comm), algorithm_(std::move(algorithm)) {}

  std::string name() const override {
    return algorithm_.empty() ? "arcoll" : "arcoll/" + algorithm_;
  }
  std::string description() const override {
    return "arcoll " + (algorithm_.empty() ? comm_.algorithm_name() : algorithm_) + " over " +
           comm_.transport_name();
  }
  void allreduce(const void* send, void* recv, std::size_t count, arcoll::DataType type,
                 arcoll::ReduceOp op) override {
    if (!algorithm_.empty() && comm_.options().algorithm != algorithm_)
      comm_.set_algorithm(algorithm_);
    comm_.allreduce(send, recv, count, type, op);
  }
  void barrier() override { comm_.barrier(); }

 private:
  arcoll::Communicator& comm_;
  std::string algorithm_;  // empty: whatever the communicator was created with
};

}  // namespace

std::unique_ptr<Backend> make_arcoll_backend(arcoll::Communicator& comm,
                                             const std::string& algorithm) {
  return std::make_unique<ArcollBackend>(comm, algorithm);
}

const BackendRegistrar kArcollRegistration{
    {"arcoll", false, [](arcoll::Communicator& comm, const BackendOptions&) {
       return make_arcoll_backend(comm);
     }}};

}  // namespace arbench
