// Parameter servers as the gradient exchange, as MXNet's kvstore and BytePS move gradients:
// every bucket is a key. ps-bsp: the servers sum each step's pushes, and every worker gets the
// sum back (the all-reduce's result, through servers; the workers step their own optimizer).
// ps-asp and ps-ssp:K: the servers keep the weights and step them by SGD with momentum as each
// worker's push arrives (its rate divided by the workers, so that a round of pushes moves as
// far as one synchronous step); workers pull the weights back, ssp's no more than K pushes
// ahead of the slowest worker.
#include <cstdlib>
#include <map>
#include <stdexcept>

#include "arcoll/parameter_server.hpp"
#include "exchange.hpp"

namespace arbench::train {

std::optional<arcoll::ParameterServerOptions> parameter_server_options(const std::string& name,
                                                                       const std::string& parameter,
                                                                       int job_size, int dedicated,
                                                                       double learning_rate,
                                                                       double momentum) {
  arcoll::ParameterServerOptions options;
  if (name == "ps-bsp") {
    options.consistency = arcoll::Consistency::bsp;
  } else if (name == "ps-asp") {
    options.consistency = arcoll::Consistency::asp;
  } else if (name == "ps-ssp") {
    options.consistency = arcoll::Consistency::ssp;
    options.staleness = parameter.empty() ? -1 : std::atoi(parameter.c_str());
    if (parameter.find_first_not_of("0123456789") != std::string::npos || options.staleness < 0)
      throw std::invalid_argument("ps-ssp:K needs K, the staleness bound, a whole number >= 0");
  } else {
    return std::nullopt;
  }
  if (!parameter.empty() && name != "ps-ssp")
    throw std::invalid_argument(name + " takes no ':' parameter");
  for (int s = 0; s < dedicated; ++s) options.server_ranks.push_back(job_size - dedicated + s);
  const int workers = job_size - dedicated;
  if (options.consistency != arcoll::Consistency::bsp) {
    options.rule = arcoll::ServerRule::sgd;
    options.learning_rate = learning_rate / workers;
    options.momentum = momentum;
  }
  return options;
}

namespace {

class PsExchange final : public GradientExchange {
 public:
  PsExchange(const ExchangeSetup& setup, const arcoll::ParameterServerOptions& options,
             std::string name)
      : comm_(setup.comm),
        server_(std::make_unique<arcoll::ParameterServer>(*setup.job, options)),
        weights_(options.rule == arcoll::ServerRule::sgd),
        description_(name + ": parameter server push_pull, " +
                     (options.server_ranks.empty()
                          ? "a server share in every worker"
                          : std::to_string(options.server_ranks.size()) + " dedicated server(s)") +
                     (weights_ ? ", servers step SGD" : ", servers sum")) {}
  ~PsExchange() override {
    try {
      server_->finish();
    } catch (...) {
    }
  }
  std::string description() const override { return description_; }
  bool returns_weights() const override { return weights_; }
  void prepare(const std::vector<std::pair<float*, std::vector<float>>>& buckets) override {
    for (const auto& [buffer, initial] : buckets) {
      const std::uint64_t key = keys_.size() + 1;
      server_->register_tensor(key, initial.size(), arcoll::DataType::f32, initial.data());
      keys_[buffer] = key;
    }
  }
  Pending start_sum(float* data, std::size_t count) override {
    auto it = keys_.find(data);
    if (it == keys_.end())
      throw std::logic_error("parameter server exchange: a bucket of " + std::to_string(count) +
                             " floats was not prepared");
    settled_ = false;
    arcoll::WorkPtr work = server_->ipush_pull(it->second, data, data);
    return [work] { work->wait(); };
  }
  void latest_weights(float* bucket) override {
    // Every worker's pushes first, then the same weights for all.
    if (!settled_) server_->barrier();
    settled_ = true;
    server_->pull(keys_.at(bucket), bucket);
  }
  void broadcast(float* data, std::size_t count, int root) override {
    comm_.broadcast(data, count, arcoll::DataType::f32, root);
  }

 private:
  arcoll::Communicator& comm_;
  std::unique_ptr<arcoll::ParameterServer> server_;
  bool weights_;
  std::string description_;
  std::map<float*, std::uint64_t> keys_;
  bool settled_ = false;  // no push since the last barrier
};

std::unique_ptr<GradientExchange> make(const ExchangeSetup& setup, const std::string& name) {
  const auto options =
      parameter_server_options(name, setup.parameter, setup.job->size(), setup.dedicated_servers,
                               setup.learning_rate, setup.momentum);
  return std::make_unique<PsExchange>(setup, *options, name);
}

const ExchangeRegistrar kBsp({"ps-bsp", "parameter servers, bulk synchronous (servers sum)", false,
                              false, nullptr,
                              [](const ExchangeSetup& s) { return make(s, "ps-bsp"); }});
const ExchangeRegistrar kAsp({"ps-asp", "parameter servers, asynchronous (servers step SGD)", false,
                              false, nullptr,
                              [](const ExchangeSetup& s) { return make(s, "ps-asp"); }});
const ExchangeRegistrar kSsp({"ps-ssp", "parameter servers, stale synchronous ps-ssp:K", false,
                              false, nullptr,
                              [](const ExchangeSetup& s) { return make(s, "ps-ssp"); }});

}  // namespace
}  // namespace arbench::train
