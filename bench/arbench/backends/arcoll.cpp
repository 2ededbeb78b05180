// arcoll's own Communicator: what arbench measures by default.
#include "arbench/backends/backend.hpp"

namespace arbench {
namespace {

class ArcollBackend final : public Backend {
 public:
  explicit ArcollBackend(arcoll::Communicator& comm) : comm_(comm) {}

  std::string name() const override { return "arcoll"; }
  std::string description() const override {
    return "arcoll " + comm_.algorithm_name() + " over " + comm_.transport_name();
  }
  void allreduce(const void* send, void* recv, std::size_t count, arcoll::DataType type,
                 arcoll::ReduceOp op) override {
    comm_.allreduce(send, recv, count, type, op);
  }
  void barrier() override { comm_.barrier(); }

 private:
  arcoll::Communicator& comm_;
};

}  // namespace

std::unique_ptr<Backend> make_arcoll_backend(arcoll::Communicator& comm) {
  return std::make_unique<ArcollBackend>(comm);
}

}  // namespace arbench
