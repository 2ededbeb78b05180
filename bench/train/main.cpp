// arbench train: data-parallel SGD with libtorch on real data (Fashion-MNIST) or synthetic
// ImageNet-shaped batches, the gradients exchanged while backward runs through arcoll,
// torch's Gloo process group, MPI or NCCL in the same run, from the same seed and data order;
// time, accuracy, CPU and memory side by side. `arbench train ...` runs this program (it links
// libtorch, which arbench itself does not load).
//
// Without a launcher it forks --np ranks on this host (under mpirun when the mpi backend is
// asked for); under mpirun, srun, torchrun or scripts/cluster.sh each process is the rank the
// environment describes.
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#ifdef ARCOLL_HAVE_MPI
#include <mpi.h>
#endif

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include "arbench/cli.hpp"
#include "arbench/files.hpp"
#include "arbench/text.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/host.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/local_launcher.hpp"
#include "arcoll/options.hpp"
#include "arcoll/tuning.hpp"
#include "data_parallel.hpp"
#include "exchange.hpp"
#include "layer_profile.hpp"
#include "replay/model.hpp"
#include "results.hpp"
#include "trainer.hpp"

namespace arbench::train {
namespace {

// Every flag as text, validated by make_plan with messages that name the flag.
struct Flags {
  std::string np, model = "lenet", backends, policy = "buckets", bucket_bytes = "25M",
                  algo = "auto", wire = "f32", batch = "32", lr = "0.05", reference_batch = "128",
                  lr_scaling = "none", warmup_epochs = "0", lars = "off", momentum = "0.9",
                  weight_decay = "1e-4", epochs, steps, target = "0.89", seed = "1",
                  data = kFashionMnistDir, json, profile_layers, timeout, threads = "1", transport,
                  mpirun_args, ps_servers = "0", test_images, kill;
  bool list_models = false, elastic = false;
};

// A data-loading failure: exit code 2, as a bad flag.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Plan {
  std::optional<int> np;  // workers
  int ps_servers = 0;     // dedicated parameter servers: the job's last ranks
  int threads = 1;
  std::optional<std::int64_t> test_images;  // evaluated: the test set's first N (default all)
  std::vector<std::string> backends;
  std::vector<TrainConfig> configs;
  std::string data, json, profile_layers, transport, mpirun_args;
  std::optional<std::chrono::milliseconds> timeout;
  bool elastic = false;
  int kill_rank = -1;  // --kill RANK@STEP: the rank that dies, -1 none
};

double parse_number(const char* flag, const std::string& text, double min, double max) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value) || value < min || value > max)
    throw UsageError(std::string(flag) + " " + quoted(text) + ": expected a number from " +
                     printf_string("%g to %g", min, max));
  return value;
}

template <class T, class Parse>
std::vector<T> parse_list(const std::string& text, Parse parse) {
  std::vector<T> out;
  for (const std::string& item : split_list(text)) out.push_back(parse(item));
  return out;
}

// "ps-ssp:2" is the backend "ps-ssp" with the parameter "2".
std::pair<std::string, std::string> backend_name(const std::string& backend) {
  const auto colon = backend.find(':');
  if (colon == std::string::npos) return {backend, ""};
  return {backend.substr(0, colon), backend.substr(colon + 1)};
}

Plan make_plan(const Flags& flags) {
  Plan plan;
  if (!flags.np.empty()) plan.np = static_cast<int>(parse_integer("--np", flags.np, 1, 4096));
  plan.threads = static_cast<int>(parse_integer("--threads", flags.threads, 1, 1024));
  const NetInfo* net = NetRegistry::instance().find(flags.model);
  if (net == nullptr)
    throw UsageError("--model " + quoted(flags.model) +
                     " is not a model here (known: " + NetRegistry::instance().name_list() + ")");
  // Backends: the given ones, or every one of this build.
  // Backends: the given ones, or those of this build that a comparison runs by default, arcoll
  // first (the others are compared with it).
  if (!flags.backends.empty()) {
    plan.backends = split_list(flags.backends);
  } else {
    plan.backends.push_back("arcoll");
    for (const ExchangeInfo* info : ExchangeRegistry::instance().all())
      if (info->by_default && info->name != "arcoll") plan.backends.push_back(info->name);
  }
  plan.ps_servers = static_cast<int>(parse_integer("--ps-servers", flags.ps_servers, 0, 4096));
  bool parameter_servers = false;
  for (const std::string& backend : plan.backends) {
    const auto [name, parameter] = backend_name(backend);
    if (auto package = missing_backend_package(name))
      throw UsageError("--backends: arbench was built without " + name + " (install " + *package +
                       ")");
    if (ExchangeRegistry::instance().find(name) == nullptr)
      throw UsageError("--backends: unknown backend " + quoted(backend) +
                       " (known: " + ExchangeRegistry::instance().name_list() + ")");
    try {
      parameter_servers |= parameter_server_options(name, parameter, 2, 0, 0, 0).has_value();
    } catch (const std::invalid_argument& e) {
      throw UsageError("--backends " + quoted(backend) + ": " + e.what());
    }
    if (parameter.size() > 0 && name.rfind("ps-", 0) != 0)
      throw UsageError("--backends " + quoted(backend) + ": " + name + " takes no ':' parameter");
    if (name == "mpi" && plan.ps_servers > 0)
      throw UsageError(
          "--ps-servers: the mpi backend runs on all of MPI_COMM_WORLD, servers "
          "included: leave it out of --backends");
  }
  if (plan.ps_servers > 0 && !parameter_servers)
    throw UsageError(
        "--ps-servers " + std::to_string(plan.ps_servers) +
        " without a parameter-server backend (ps-bsp, ps-asp, ps-ssp:K) in --backends");
  const auto policies = split_list(flags.policy);
  for (const std::string& p : policies) {
    if (p == "ps") throw UsageError("--policy ps: arbench train has no parameter server yet");
    try {
      arcoll::replay::parse_policy(p);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--policy: ") + e.what());
    }
  }
  const auto algorithms = split_list(flags.algo);
  const auto known_algorithms = arcoll::Communicator::allreduce_algorithms();
  for (const std::string& a : algorithms)
    if (a != "auto" &&
        std::find(known_algorithms.begin(), known_algorithms.end(), a) == known_algorithms.end())
      throw UsageError("--algo " + quoted(a) + " is not an all-reduce algorithm here");
  struct Wire {
    arcoll::DataType type;
    bool error_feedback;
  };
  const auto wires = parse_list<Wire>(flags.wire, [](const std::string& w) {
    const bool feedback = w.size() > 3 && w.ends_with("+ef");
    const std::string base = feedback ? w.substr(0, w.size() - 3) : w;
    if (base == "f32" && !feedback) return Wire{arcoll::DataType::f32, false};
    if (base == "f16") return Wire{arcoll::DataType::f16, feedback};
    if (base == "bf16") return Wire{arcoll::DataType::bf16, feedback};
    throw UsageError("--wire " + quoted(w) + ": expected f32, f16, bf16, f16+ef or bf16+ef");
  });
  const auto batches = parse_list<int>(flags.batch, [](const std::string& b) {
    return static_cast<int>(parse_integer("--batch", b, 1, 1 << 20));
  });
  const auto scalings = parse_list<LrScaling>(flags.lr_scaling, [](const std::string& s) {
    if (s == "none") return LrScaling::none;
    if (s == "linear") return LrScaling::linear;
    if (s == "sqrt") return LrScaling::sqrt;
    throw UsageError("--lr-scaling " + quoted(s) + ": expected none, linear or sqrt");
  });
  const auto warmups = parse_list<double>(flags.warmup_epochs, [](const std::string& w) {
    return parse_number("--warmup-epochs", w, 0, 1000);
  });
  const auto lars = parse_list<bool>(flags.lars, [](const std::string& l) {
    if (l == "off") return false;
    if (l == "on") return true;
    throw UsageError("--lars " + quoted(l) + ": expected off, on or off,on");
  });
  TrainConfig base;
  base.model = flags.model;
  base.bucket_bytes = parse_size("--bucket-bytes", flags.bucket_bytes);
  if (base.bucket_bytes == 0) throw UsageError("--bucket-bytes must be positive");
  base.lr = parse_number("--lr", flags.lr, 0, 1e3);
  base.reference_batch =
      static_cast<int>(parse_integer("--reference-batch", flags.reference_batch, 1, 1 << 30));
  base.momentum = parse_number("--momentum", flags.momentum, 0, 0.9999);
  base.weight_decay = parse_number("--weight-decay", flags.weight_decay, 0, 1);
  base.target_accuracy = parse_number("--target-accuracy", flags.target, 0, 1);
  base.seed = static_cast<std::uint64_t>(parse_integer("--seed", flags.seed, 0, 1ll << 62));
  const bool synthetic = net->data == DataKind::imagenet;
  base.epochs = flags.epochs.empty()
                    ? (synthetic ? 1 : 3)
                    : static_cast<int>(parse_integer("--epochs", flags.epochs, 1, 100000));
  base.steps_per_epoch = flags.steps.empty()
                             ? (synthetic ? 10 : 0)
                             : static_cast<int>(parse_integer("--steps", flags.steps, 1, 1 << 30));
  if (synthetic && base.steps_per_epoch <= base.warmup_iterations)
    throw UsageError("--steps must exceed the " + std::to_string(base.warmup_iterations) +
                     " untimed warm-up iterations of synthetic data");
  if (!synthetic && base.steps_per_epoch > 0 &&
      static_cast<long long>(base.steps_per_epoch) * base.epochs <= kUntimedIterations)
    throw UsageError("--steps " + flags.steps + " over " + std::to_string(base.epochs) +
                     " epoch(s) leaves nothing to time: the first " +
                     std::to_string(kUntimedIterations) +
                     " iterations are untimed warm-up; give more steps or epochs");
  for (const auto& policy : policies)
    for (const auto& algorithm : algorithms)
      for (const Wire& wire : wires)
        for (int batch : batches)
          for (LrScaling scaling : scalings)
            for (double warmup : warmups)
              for (bool l : lars) {
                TrainConfig c = base;
                c.policy = policy;
                c.algorithm = algorithm;
                c.wire = wire.type;
                c.error_feedback = wire.error_feedback;
                c.batch = batch;
                c.lr_scaling = scaling;
                c.warmup_epochs = warmup;
                c.lars = l;
                plan.configs.push_back(c);
              }
  plan.data = flags.data;
  if (!flags.test_images.empty()) {
    if (synthetic)
      throw UsageError("--test-images: " + flags.model +
                       " trains on synthetic batches and is not evaluated");
    plan.test_images = parse_integer("--test-images", flags.test_images, 1, 1ll << 40);
  }
  plan.elastic = flags.elastic;
  if (!flags.kill.empty()) {
    const auto at = flags.kill.find('@');
    if (!flags.elastic) throw UsageError("--kill: only an --elastic run carries on without a rank");
    if (at == std::string::npos)
      throw UsageError("--kill " + quoted(flags.kill) + ": expected RANK@STEP (2@300)");
    const int workers = plan.np.value_or(2);
    plan.kill_rank = static_cast<int>(
        parse_integer("--kill's rank", flags.kill.substr(0, at), 0, workers - 1));
    if (workers < 2) throw UsageError("--kill: a run of one rank has no survivor");
    const std::int64_t step = parse_integer("--kill's step", flags.kill.substr(at + 1), 0, 1ll << 40);
    for (TrainConfig& c : plan.configs) {
      c.kill_rank = plan.kill_rank;
      c.kill_step = step;
    }
  }
  if (flags.elastic) {
    if (plan.backends != std::vector<std::string>{"arcoll"})
      throw UsageError("--elastic: only arcoll's exchange shrinks to its survivors "
                       "(--backends arcoll)");
    if (plan.configs.size() != 1)
      throw UsageError("--elastic runs one configuration: a lost rank is lost for the rest");
    if (plan.ps_servers > 0) throw UsageError("--elastic: not with --ps-servers");
    for (TrainConfig& c : plan.configs) c.elastic = true;
  }
  plan.json = flags.json;
  plan.profile_layers = flags.profile_layers;
  plan.transport = flags.transport;
  plan.mpirun_args = arbench::mpirun_args_or_default(flags.mpirun_args, flags.transport);
  if (!flags.timeout.empty())
    plan.timeout = std::chrono::milliseconds(
        static_cast<long long>(1000 * parse_number("--timeout", flags.timeout, 0.001, 1e6)));
  for (const auto& [flag, path] :
       {std::pair{"--json", plan.json}, {"--profile-layers", plan.profile_layers}})
    if (!path.empty())
      if (auto error = check_writable(flag, path)) throw UsageError(*error);
  return plan;
}

// Every rank must train the same thing: rank 0's arguments against this rank's; a difference
// fails every rank, naming the first argument that differs.
void agree_on_arguments(arcoll::Communicator& comm, const std::vector<std::string>& args) {
  std::string mine;
  for (const std::string& a : args) mine += a + '\0';
  std::int64_t length = static_cast<std::int64_t>(mine.size());
  comm.broadcast(&length, 1, arcoll::DataType::i64, 0);
  std::string root(static_cast<std::size_t>(length), '\0');
  if (comm.rank() == 0) root = mine;
  comm.broadcast(root.data(), root.size(), arcoll::DataType::u8, 0);
  std::int32_t differing = root == mine ? -1 : comm.rank();
  comm.allreduce(&differing, 1, arcoll::DataType::i32, arcoll::ReduceOp::max);
  if (differing < 0) return;
  if (differing != comm.rank())
    throw UsageError("rank " + std::to_string(differing) +
                     " was started with other arguments than rank 0: every rank must train the "
                     "same configuration");
  std::vector<std::string> root_args;
  for (std::size_t at = 0; at < root.size();) {
    const std::size_t end = root.find('\0', at);
    root_args.push_back(root.substr(at, end - at));
    at = end + 1;
  }
  std::size_t i = 0;
  while (i < args.size() && i < root_args.size() && args[i] == root_args[i]) ++i;
  auto word = [](const std::vector<std::string>& list, std::size_t at) {
    return at < list.size() ? quoted(list[at]) : std::string("nothing");
  };
  throw UsageError("rank " + std::to_string(comm.rank()) + " was started with " + word(args, i) +
                   " where rank 0 has " + word(root_args, i) +
                   ": every rank must train the same configuration (model, batch, schedule)");
}

// Every rank reads the data set; one that cannot fails them all at once.
std::unique_ptr<TrainingData> load_data(arcoll::Communicator& comm, const Plan& plan) {
  if (NetRegistry::instance().find(plan.configs.front().model)->data != DataKind::fashion_mnist)
    return nullptr;
  auto data = std::make_unique<TrainingData>();
  std::string error;
  try {
    data->train = load_fashion_mnist(plan.data, "train");
    data->test = load_fashion_mnist(plan.data, "t10k");
    if (plan.test_images && *plan.test_images < data->test.labels.size(0)) {
      data->test.images = data->test.images.slice(0, 0, *plan.test_images);
      data->test.labels = data->test.labels.slice(0, 0, *plan.test_images);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::int32_t failed = error.empty() ? 0 : 1;
  comm.allreduce(&failed, 1, arcoll::DataType::i32, arcoll::ReduceOp::max);
  if (!error.empty()) throw DataError(error);
  if (failed) throw DataError("another rank could not read the data set");
  for (const TrainConfig& c : plan.configs)
    if (std::int64_t(c.batch) * comm.size() > data->train.labels.size(0))
      throw UsageError("--batch " + std::to_string(c.batch) + " on " + std::to_string(comm.size()) +
                       " ranks is more than the " + std::to_string(data->train.labels.size(0)) +
                       " training images");
  return data;
}

std::string blas_in_use() {
  std::error_code ignored;
  const auto target =
      std::filesystem::canonical("/etc/alternatives/libblas.so.3-x86_64-linux-gnu", ignored);
  return target.empty() ? "unknown" : target.parent_path().filename().string();
}

nlohmann::json metadata(const arcoll::Communicator& comm, const Plan& plan, const StagedNet& net,
                        int argc, const char* const* argv) {
  const arcoll::HostInfo host = arcoll::host_info();
  std::int64_t parameters = 0;
  for (const auto& p : net->parameters()) parameters += p.numel();
  return {
      {"command", shell_command_line(argc, argv)},
      {"date", utc_now()},
      {"arcoll_version", std::string(arcoll::version())},
      {"git_commit", std::string(arcoll::git_commit())},
      {"host", host.hostname},
      {"cpu", host.cpu_model},
      {"cores", host.cores},
      {"ranks", comm.size()},
      {"hosts", comm.node_count()},
      {"transport", comm.transport_name()},
      {"threads_per_rank", plan.threads},
      {"blas", blas_in_use()},
      {"torch", std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR)},
      {"model", plan.configs.front().model},
      {"parameters", parameters},
      {"data", data_name(NetRegistry::instance().find(plan.configs.front().model)->data)},
      // null: the whole test set
      {"test_images", plan.test_images ? nlohmann::json(*plan.test_images) : nlohmann::json()}};
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double most = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    most = std::max(most, (a[i] - b[i]).abs().max().item<double>());
  return most;
}

// Whether `backend` trains `config`: algorithms and 16-bit wires are arcoll's, so the others
// run each configuration once (its f32 form with the first --algo). The dedicated servers
// follow the workers through the same list.
bool runs(const std::string& backend, const TrainConfig& config, const Plan& plan) {
  return backend == "arcoll" || (config.wire == arcoll::DataType::f32 &&
                                 config.algorithm == plan.configs.front().algorithm);
}

// A dedicated server: serves every parameter-server run the workers make, in their order.
int serve_parameter_servers(const Plan& plan, arcoll::Communicator& job) {
  for (const TrainConfig& config : plan.configs)
    for (const std::string& backend : plan.backends) {
      const auto [name, parameter] = backend_name(backend);
      const auto options = parameter_server_options(name, parameter, job.size(), plan.ps_servers,
                                                    config.lr, config.momentum);
      if (!options || !runs(backend, config, plan)) continue;
      arcoll::ParameterServer server(job, *options);
      server.serve();
    }
  return 0;
}

int run_rank(const Plan& plan, const arcoll::LaunchInfo& launch, int argc,
             const char* const* argv) {
  torch::set_num_threads(plan.threads);
  arcoll::Options options = arcoll::Options::from_env();
  if (!plan.transport.empty()) options.transport = plan.transport;
  if (plan.timeout) options.timeout = *plan.timeout;
  arcoll::Communicator job(launch, options);
  agree_on_arguments(job, std::vector<std::string>(argv + 1, argv + argc));
  // Dedicated parameter servers are the job's last ranks: they serve, and the workers train
  // among themselves.
  const int workers = job.size() - plan.ps_servers;
  if (workers < 1)
    throw UsageError("--ps-servers " + std::to_string(plan.ps_servers) + " leaves no worker in " +
                     std::to_string(job.size()) + " ranks");
  const bool server = job.rank() >= workers;
  std::unique_ptr<arcoll::Communicator> worker_group;
  if (plan.ps_servers > 0) {
    worker_group = job.split(server ? -1 : 0);
    if (server) return serve_parameter_servers(plan, job);
  }
  arcoll::Communicator& comm = worker_group ? *worker_group : job;
  bool root = comm.rank() == 0;
  bool shrunk = false;  // an elastic run lost a rank: `comm` is broken, its survivors went on
  const std::unique_ptr<TrainingData> data = load_data(comm, plan);

  const TrainConfig& first = plan.configs.front();
  const NetInfo& info = *NetRegistry::instance().find(first.model);
  if (root) {
    torch::manual_seed(first.seed);
    const nlohmann::json meta = metadata(comm, plan, info.build(), argc, argv);
    std::string backends;
    for (const auto& b : plan.backends) backends += (backends.empty() ? "" : ",") + b;
    const std::string evaluated_on =
        plan.test_images ? printf_string(" (accuracy on the first %lld test images)",
                                         static_cast<long long>(*plan.test_images))
                         : "";
    print(printf_string(
              "# arbench train: %s (%lld parameters) on %s%s, %d ranks on %d host(s), %d "
              "thread(s) per rank, BLAS %s, torch %s\n# %zu configuration(s) x "
              "backends %s\n",
              first.model.c_str(), meta["parameters"].get<long long>(), data_name(info.data),
              evaluated_on.c_str(),
              comm.size(), comm.node_count(), plan.threads, meta["blas"].get<std::string>().c_str(),
              meta["torch"].get<std::string>().c_str(), plan.configs.size(), backends.c_str()) +
          table_header());
  }
  std::vector<TrainRow> rows;
  std::set<std::string> skipped;
  std::optional<Trainer::StageTimes> profile;
  for (std::size_t c = 0; c < plan.configs.size(); ++c) {
    const TrainConfig& config = plan.configs[c];
    Trainer trainer(comm, config, data.get());
    const double single = comm.size() > 1 ? trainer.single_rank_iteration() : 0;
    // Fusion groups gradients by when they become ready: measured here, shared by all.
    std::vector<double> backward_seconds;
    if (config.policy == "fusion") backward_seconds = trainer.profile_stages(3).backward;
    const std::size_t first_row = rows.size();
    std::vector<torch::Tensor> first_weights;
    for (const std::string& backend : plan.backends) {
      const auto [name, parameter] = backend_name(backend);
      const ExchangeInfo& exchange_info = *ExchangeRegistry::instance().find(name);
      if (!runs(backend, config, plan)) {
        if (skipped.insert(backend + " settings").second && root)
          print("# " + backend +
                " runs only the f32 configurations with the first --algo (wire "
                "formats and algorithms are arcoll's)\n");
        continue;
      }
      if (exchange_info.needs_mpirun && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {
        if (skipped.insert(backend).second && root)
          print("# " + backend +
                " skipped: its ranks must be started by mpirun (arbench train "
                "--np N starts it; under another launcher, leave it out of --backends)\n");
        continue;
      }
      auto setup_on = [&](arcoll::Communicator& on) {
        return ExchangeSetup{on,
                             launch,
                             options.timeout,
                             config.algorithm,
                             config.wire,
                             config.error_feedback,
                             parameter,
                             &job,
                             plan.ps_servers,
                             config.lr,
                             config.momentum};
      };
      if (exchange_info.unavailable)
        if (auto why = exchange_info.unavailable(setup_on(comm))) {
          if (skipped.insert(backend).second && root)
            print("# " + backend + " skipped: " + *why + "\n");
          continue;
        }
      TrainRow row{config, {}};
      // An elastic run goes on with the survivors: rank 0 of theirs prints.
      row.result = trainer.run(
          backend,
          [&](arcoll::Communicator& on) { return exchange_info.create(setup_on(on)); },
          backward_seconds, [&](const EpochPoint& p) {
            if (trainer.communicator().rank() == 0)
              print(printf_string("#   %s epoch %d: %.2f%% test accuracy, loss %.4f, %.1f s\n",
                                  backend.c_str(), p.epoch, 100 * p.accuracy, p.loss,
                                  p.train_seconds));
          });
      arcoll::Communicator& now = trainer.communicator();
      const bool printing = now.rank() == 0;
      if (printing)
        for (const LostRank& lost : row.result.lost)
          print(printf_string(
              "#   %s: a rank was lost at step %lld: its step failed after %.1f ms, the "
              "survivors shrank in %.1f ms and sent the weights again in %.1f ms (%.1f ms "
              "lost); %d ranks go on\n",
              backend.c_str(), static_cast<long long>(lost.step), 1e3 * lost.failed_step_seconds,
              1e3 * lost.shrink_seconds, 1e3 * lost.state_seconds,
              1e3 * (lost.failed_step_seconds + lost.shrink_seconds + lost.state_seconds),
              lost.ranks_after));
      row.result.single_rank_iteration = single;
      reduce_result(now, config.batch, row.result);
      if (now.size() == 1) row.result.scaling_efficiency = 1;
      if (first_weights.empty()) {
        first_weights = trainer.final_weights();
      } else {
        double difference = max_difference(first_weights, trainer.final_weights());
        now.allreduce(&difference, 1, arcoll::DataType::f64, arcoll::ReduceOp::max);
        row.result.weights_max_difference = difference;
      }
      if (printing) print(table_row(row));
      root = printing;
      shrunk = shrunk || !row.result.lost.empty();
      rows.push_back(std::move(row));
    }
    if (!plan.profile_layers.empty()) {
      if (!profile) {
        profile = trainer.profile_stages(2 * trainer.timed_sample());
        if (root)
          write_layer_profile(plan.profile_layers, trainer.build_net(), config.model, config.batch,
                              *profile);
        comm.barrier();
        // The prediction needs this machine's link costs, as a collective loads them.
        if (options.tuning_file.empty()) {
          const arcoll::CalibratedTuning calibrated =
              arcoll::calibrated_tuning(comm, arcoll::calibration_from_env());
          if (!calibrated.tuning.transports.empty()) comm.set_tuning(calibrated.tuning);
        }
      }
      const auto predicted = predict_iteration_from_profile(comm, plan.profile_layers, config);
      for (std::size_t r = first_row; r < rows.size(); ++r) {
        const TrainResult& measured = rows[r].result;
        if (measured.backend != "arcoll") continue;
        rows[r].predicted_iteration = predicted.iteration;
        if (root)
          print(printf_string(
              "# %s: replay model %s predicts %.2f ms per iteration (compute %.2f, "
              "exposed communication %.2f); measured %.2f ms (p50; exposed %.2f): "
              "%+.1f%%\n",
              config.label().c_str(), plan.profile_layers.c_str(), predicted.iteration * 1e3,
              predicted.compute * 1e3, predicted.exposed * 1e3, measured.iteration_p50 * 1e3,
              measured.exposed_seconds * 1e3,
              100 * (predicted.iteration / measured.iteration_p50 - 1)));
      }
    }
  }
  if (root) {
    print(backend_comparison(rows));
    if (plan.configs.size() > 1) print(ranking(rows, first.target_accuracy));
    if (!plan.json.empty()) {
      torch::manual_seed(first.seed);
      write_atomically(
          plan.json,
          results_json(rows, metadata(comm, plan, info.build(), argc, argv)).dump(2) + "\n");
    }
  }
  if (!shrunk) comm.barrier();
  return rows.empty() && !plan.backends.empty() ? 1 : 0;
}

// One rank: errors become messages and exit codes (2 for flags and data, 1 otherwise).
int rank_main(const Plan& plan, const arcoll::LaunchInfo& launch, int argc,
              const char* const* argv) {
  try {
    return run_rank(plan, launch, argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench train: %s\n", e.what());
    return kUsageError;
  } catch (const DataError& e) {
    std::fprintf(stderr, "arbench train: %s\n", e.what());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench train: rank %d: %s\n", launch.rank, e.what());
    return 1;
  }
}

void add_flags(CLI::App& app, Flags& f) {
  auto add = [&](const char* names, std::string& value, const char* type, const char* help) {
    return app.add_option(names, value, help)->type_name(type);
  };
  add("--np", f.np, "N",
      "Workers to fork on this host (default 2), --ps-servers more; under a launcher, its world "
      "less the servers");
  add("--model", f.model, "NAME",
      "lenet, resnet18 (Fashion-MNIST, for accuracy), alexnet, googlenet, resnet50 (synthetic "
      "ImageNet batches, for throughput)")
      ->capture_default_str();
  add("--backends,--exchange", f.backends, "LIST",
      "What exchanges the gradients: arcoll, gloo (torch's ProcessGroupGloo), mpi "
      "(MPI_Allreduce), nccl (GPU), and parameter servers ps-bsp, ps-asp, ps-ssp:K; default: "
      "arcoll, gloo, mpi and nccl where built");
  add("--policy", f.policy, "LIST",
      "When gradients travel: sync-after-backward, wfbp, buckets (DDP), fusion (Horovod); a list "
      "trains each")
      ->capture_default_str();
  add("--bucket-bytes", f.bucket_bytes, "SIZE", "DDP's bucket cap for --policy buckets")
      ->capture_default_str();
  add("--algo", f.algo, "LIST", "arcoll's all-reduce algorithm(s)")->capture_default_str();
  add("--wire", f.wire, "LIST",
      "arcoll's wire format(s): f32, f16, bf16, and f16+ef / bf16+ef with error feedback")
      ->capture_default_str();
  add("--batch", f.batch, "LIST", "Samples per rank per iteration; a list trains each")
      ->capture_default_str();
  add("--lr", f.lr, "X", "Learning rate at --reference-batch (global)")->capture_default_str();
  add("--reference-batch", f.reference_batch, "N", "The global batch --lr is meant for")
      ->capture_default_str();
  add("--lr-scaling", f.lr_scaling, "LIST",
      "How the rate grows with the global batch: none, linear (Goyal et al.), sqrt")
      ->capture_default_str();
  add("--warmup-epochs", f.warmup_epochs, "LIST",
      "Epochs of linear warmup from --lr to the scaled rate (cosine decay follows)")
      ->capture_default_str();
  add("--lars", f.lars, "LIST", "Layer-wise rate clipping (LARC): off, on, or off,on")
      ->capture_default_str();
  add("--momentum", f.momentum, "X", "SGD momentum")->capture_default_str();
  add("--weight-decay", f.weight_decay, "X", "L2 weight decay")->capture_default_str();
  add("--epochs", f.epochs, "N", "Epochs (default 3; synthetic data: 1)");
  add("--steps", f.steps, "N",
      "Iterations per epoch (default: the whole shard; synthetic data: 10, the first 2 untimed)");
  add("--target-accuracy", f.target, "X", "Test accuracy whose time to reach is reported")
      ->capture_default_str();
  add("--seed", f.seed, "N", "Initial weights and data order (the same for every backend)")
      ->capture_default_str();
  app.add_flag("--elastic", f.elastic,
               "A rank lost mid-run leaves the others to shrink and carry on from their weights, "
               "their data re-sharded (arcoll's exchange, one configuration)");
  add("--kill", f.kill, "RANK@STEP",
      "With --elastic: that rank is SIGKILLed at that step of the run (from 0)");
  add("--data", f.data, "DIR", "Fashion-MNIST's gzipped IDX files")->capture_default_str();
  add("--test-images", f.test_images, "N",
      "Evaluate each epoch on the test set's first N images (default: all 10,000), for quick "
      "runs");
  add("--json", f.json, "FILE", "Write every figure as JSON (schema arbench.train/1)");
  add("--profile-layers", f.profile_layers, "FILE",
      "Measure each layer's forward and backward time, write them as a replay model file, and "
      "print the replayer's prediction beside the measured iteration time");
  add("--threads", f.threads, "N", "Intra-op threads per rank")->capture_default_str();
  add("--timeout", f.timeout, "SECONDS",
      "How long any wait may last (default: ARCOLL_TIMEOUT or 60)");
  add("--transport", f.transport, "NAME", "arcoll's transport (default: auto)");
  add("--ps-servers", f.ps_servers, "K",
      "Dedicated parameter servers for the ps-* backends: K more ranks (the job's last) that "
      "only serve; 0: a server share in every worker")
      ->capture_default_str();
  add("--mpirun-args", f.mpirun_args, "ARGS",
      "Extra mpirun flags when arbench starts mpirun (default: --mca pml ob1 --mca btl "
      "self,vader,tcp, and btl self,tcp with --transport tcp)");
  app.add_flag(
      "--list-models", f.list_models,
      "List the models with their parameter counts (and the replayer's, where it has the model)");
}

int list_models() {
  for (const NetInfo* info : NetRegistry::instance().all()) {
    torch::manual_seed(0);
    std::int64_t parameters = 0;
    for (const auto& p : info->build()->parameters()) parameters += p.numel();
    std::string replay = "-";
    if (!info->replay_model.empty())
      replay = std::to_string(arcoll::replay::build_model(info->replay_model).parameter_count());
    print(printf_string("%-10s %10lld parameters (replayer: %s)  %s\n", info->name.c_str(),
                        static_cast<long long>(parameters), replay.c_str(), info->summary.c_str()));
  }
  return 0;
}

}  // namespace
}  // namespace arbench::train

int main(int argc, char** argv) {
  using namespace arbench::train;
  CLI::App app{
      "arbench train: data-parallel training through arcoll, Gloo, MPI and NCCL, compared"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  Flags flags;
  add_flags(app, flags);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : arbench::kUsageError;
  }
  if (flags.list_models) return list_models();
#ifdef ARCOLL_HAVE_MPI
  // Under mpirun, MPI first: arcoll's bootstrap may use it, and the mpi backend calls it from
  // its own thread.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
#endif
  Plan plan;
  arcoll::LaunchInfo here;
  try {
    plan = make_plan(flags);
    try {
      here = arcoll::detect_launch();
    } catch (const arcoll::Error& e) {
      throw arbench::UsageError(e.what());
    }
    if (here.source != "default" && plan.np && *plan.np + plan.ps_servers != here.world_size)
      throw arbench::UsageError("--np " + std::to_string(*plan.np) + " workers and " +
                                std::to_string(plan.ps_servers) +
                                " --ps-servers disagree with the world size " +
                                std::to_string(here.world_size) + " set by " + here.source);
  } catch (const arbench::UsageError& e) {
    std::fprintf(stderr, "arbench train: %s\n", e.what());
    return arbench::kUsageError;
  }
  if (here.source != "default") return rank_main(plan, here, argc, argv);
  const int ranks = plan.np.value_or(2) + plan.ps_servers;
  for (const std::string& backend : plan.backends)
    if (ExchangeRegistry::instance().find(backend_name(backend).first)->needs_mpirun)
      return arbench::reexec_under_mpirun(plan.mpirun_args, ranks, argc, argv);
  try {
    arcoll::LocalLaunchOptions local = arbench::local_launch(ranks);
    // An elastic run goes on after a rank fails; the one --kill kills is no failure.
    if (plan.elastic) local.failure_grace = std::chrono::hours(24);
    std::vector<arcoll::RankExit> exits = arcoll::run_local_ranks(
        local, [&] { return rank_main(plan, arcoll::detect_launch(), argc, argv); });
    std::erase_if(exits, [&](const arcoll::RankExit& e) {
      return e.rank == plan.kill_rank && e.signal == SIGKILL;
    });
    return arbench::exit_status(exits);
  } catch (const arbench::UsageError& e) {
    std::fprintf(stderr, "arbench train: %s\n", e.what());
    return arbench::kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench train: %s\n", e.what());
    return 1;
  }
}
