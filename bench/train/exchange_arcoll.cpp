// arcoll's non-blocking all-reduce: each bucket queued on the communicator's progress thread.
#include "exchange.hpp"

namespace arbench::train {
namespace {

class ArcollExchange final : public GradientExchange {
 public:
  explicit ArcollExchange(const ExchangeSetup& setup) : comm_(setup.comm) {
    comm_.set_algorithm(setup.algorithm);
    comm_.set_wire(setup.wire, setup.error_feedback);
    description_ = "arcoll iallreduce (" + comm_.algorithm_name() + ", " + comm_.transport_name() +
                   ", wire " + std::string(arcoll::to_string(setup.wire)) +
                   (setup.error_feedback ? " with error feedback" : "") + ")";
  }
  ~ArcollExchange() override {
    // The coordination that follows runs at full precision with the default algorithm.
    try {
      comm_.set_wire(arcoll::DataType::f32, false);
      comm_.set_algorithm("auto");
    } catch (...) {
    }
  }
  std::string description() const override { return description_; }
  Pending start_sum(float* data, std::size_t count) override {
    arcoll::WorkPtr work =
        comm_.iallreduce(data, data, count, arcoll::DataType::f32, arcoll::ReduceOp::sum);
    return [work] { work->wait(); };
  }
  void broadcast(float* data, std::size_t count, int root) override {
    comm_.broadcast(data, count, arcoll::DataType::f32, root);
  }

 private:
  arcoll::Communicator& comm_;
  std::string description_;
};

const ExchangeRegistrar kArcoll({"arcoll", "arcoll's non-blocking all-reduce", false, true, nullptr,
                                 [](const ExchangeSetup& setup) {
                                   return std::make_unique<ArcollExchange>(setup);
                                 }});

}  // namespace

std::optional<std::string> missing_backend_package(const std::string& name) {
  static const std::pair<const char*, const char*> kPackages[] = {
      {"gloo", "libtorch-dev (torch's ProcessGroupGloo)"},
      {"mpi", "libopenmpi-dev"},
      {"nccl", "the CUDA toolkit with NCCL"}};
  for (const auto& [known, package] : kPackages)
    if (name == known && ExchangeRegistry::instance().find(name) == nullptr)
      return std::string(package);
  return std::nullopt;
}

}  // namespace arbench::train
