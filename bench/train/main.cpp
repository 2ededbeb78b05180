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
#include "plan.hpp"
#include "replay/model.hpp"
#include "results.hpp"
#include "trainer.hpp"

namespace arbench::train {
namespace {

// A data-loading failure: exit code 2, as a bad flag.
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};


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
        arcoll::use_calibrated_link_costs(comm, arcoll::calibration_from_env());
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
