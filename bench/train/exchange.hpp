// How gradients travel: one all-reduce library behind a small interface, so that the same
// training loop, the same buckets and the same clock run over arcoll, torch's Gloo process
// group, MPI or NCCL. Each exchange registers itself (and is compiled only where its library
// was found).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/parameter_server.hpp"
#include "src/base/registry.hpp"

namespace arbench::train {

// Waits for a started all-reduce; throws what the library reported.
using Pending = std::function<void()>;

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;
  // What runs: "arcoll (iallreduce, auto)", "torch ProcessGroupGloo 1.13", "MPI_Allreduce".
  virtual std::string description() const = 0;
  // Starts summing `count` floats at `data` over every rank, in place, after the all-reduces
  // started before it; the buffer stays untouched by the caller until the wait returns.
  virtual Pending start_sum(float* data, std::size_t count) = 0;
  // Every rank's `data` becomes root's (blocking).
  virtual void broadcast(float* data, std::size_t count, int root) = 0;
  // Exchanges that keep the weights themselves (a parameter server stepping them by SGD)
  // answer each bucket with its new weights instead of the sum of the gradients.
  virtual bool returns_weights() const { return false; }
  // Before training: every bucket's buffer with its initial weights laid out as the bucket
  // is, for exchanges that keep state per bucket (a parameter server registers its keys).
  virtual void prepare(const std::vector<std::pair<float*, std::vector<float>>>& /*buckets*/) {}
  // Exchanges that return weights: once every rank's pushes so far are applied, `bucket`'s
  // weights as they then are (the same on every rank).
  virtual void latest_weights(float* /*bucket*/) {}
};

// What an exchange is built from: this rank's place in the job and the communicator arbench
// coordinates through (arcoll's own exchange runs on it; others take rendezvous data over it).
struct ExchangeSetup {
  arcoll::Communicator& comm;  // the workers
  const arcoll::LaunchInfo& launch;
  std::chrono::milliseconds timeout;
  std::string algorithm;                          // arcoll only: all-reduce algorithm
  arcoll::DataType wire = arcoll::DataType::f32;  // arcoll only: 16-bit wire formats
  bool error_feedback = false;
  // Parameter servers: what follows the ':' of the backend's name ("ps-ssp:2"), the whole
  // job (the workers and, last, the dedicated servers), and the optimizer they run.
  std::string parameter;
  arcoll::Communicator* job = nullptr;
  int dedicated_servers = 0;
  double learning_rate = 0, momentum = 0;
};

struct ExchangeInfo {
  static constexpr const char* kKind = "backend";
  std::string name;
  std::string summary;
  bool needs_mpirun = false;
  bool by_default = true;  // compared when --backends is not given
  // Why this exchange cannot run here (no GPU, ...), the same on every rank, or nullopt.
  std::function<std::optional<std::string>(const ExchangeSetup&)> unavailable;
  std::function<std::unique_ptr<GradientExchange>(const ExchangeSetup&)> create;
};

using ExchangeRegistry = arcoll::Registry<ExchangeInfo>;
using ExchangeRegistrar = arcoll::Registrar<ExchangeInfo>;

// The parameter server behind a "ps-bsp", "ps-asp" or "ps-ssp" backend with its ':'
// `parameter`, for a job of `job_size` ranks whose last `dedicated` serve: the workers'
// exchange and the dedicated servers build the same one. nullopt for other backends;
// std::invalid_argument for a bad parameter.
std::optional<arcoll::ParameterServerOptions> parameter_server_options(const std::string& name,
                                                                       const std::string& parameter,
                                                                       int job_size, int dedicated,
                                                                       double learning_rate,
                                                                       double momentum);

// The backends a user may name, with those this build lacks and the package that brings them
// ("mpi" without MPI: "install libopenmpi-dev").
std::optional<std::string> missing_backend_package(const std::string& name);

}  // namespace arbench::train
