#include "arbench/sweep_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "arbench/backends/backend.hpp"
#include "arbench/cli.hpp"
#include "arbench/earlier_runs.hpp"
#include "arbench/files.hpp"
#include "arbench/report.hpp"
#include "arbench/sweep.hpp"
#include "arbench/sweep_plan.hpp"
#include "arbench/text.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/host.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/local_launcher.hpp"
#include "arcoll/options.hpp"
#include "arcoll/parameter_server.hpp"
#include "arcoll/tuning.hpp"
#include "arcoll/types.hpp"

namespace arbench {
namespace {

// "\r[ 5/13] f32 sum 32 KiB" on stderr, redrawn in place; a no-op when disabled.
class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void show(const std::string& text) {
    if (!enabled_) return;
    std::fprintf(stderr, "\r\033[K%s", text.c_str());
    std::fflush(stderr);
    visible_ = true;
  }
  void clear() {
    if (!enabled_ || !visible_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    visible_ = false;
  }

 private:
  bool enabled_;
  bool visible_ = false;
};

// The first output file that cannot be written, as a message.
std::optional<std::string> unwritable_output(const SweepPlan& plan) {
  if (!plan.json_path.empty())
    if (auto error = check_writable("--json", plan.json_path)) return error;
  if (!plan.csv_path.empty())
    if (auto error = check_writable("--csv", plan.csv_path)) return error;
  return std::nullopt;
}

// Where every rank runs, gathered from all of them (a collective call).
RunInfo describe_run(arcoll::Communicator& comm, const SweepPlan& plan) {
  struct Place {
    char host[112];
    std::int32_t node, local_rank, local_size, pid;
  };
  Place mine{};
  std::strncpy(mine.host, comm.node_name().c_str(), sizeof mine.host - 1);
  mine.node = comm.node_id();
  mine.local_rank = comm.local_rank();
  mine.local_size = comm.local_size();
  mine.pid = static_cast<std::int32_t>(::getpid());
  std::vector<Place> places(static_cast<std::size_t>(comm.size()));
  comm.allgather(&mine, places.data(), sizeof(Place), arcoll::DataType::u8);

  RunInfo info;
  if (comm.rank() == 0) info.host = arcoll::host_info();
  info.arcoll_version = std::string(arcoll::version());
  info.git_commit = std::string(arcoll::git_commit());
  info.transport = comm.transport_name();
  info.algorithm = comm.algorithm_name();
  info.world_size = comm.size();
  info.nodes = comm.node_count();
  info.ranks_per_node = places.front().local_size;
  for (std::size_t r = 0; r < places.size(); ++r) {
    const Place& p = places[r];
    if (p.local_size != places.front().local_size) info.ranks_per_node.reset();
    info.ranks.push_back({static_cast<int>(r), p.node, p.local_rank, p.pid, p.host});
  }
  info.date = utc_now();
  info.command_line = plan.command_line;
  info.min_bytes = plan.min_bytes;
  info.max_bytes = plan.max_bytes;
  info.step_factor = plan.step_factor;
  info.step_bytes = plan.step_bytes;
  info.sweep = plan.sweep;
  const arcoll::Options& options = comm.options();
  info.chunk_bytes = options.chunk_bytes;
  info.sockets_per_peer = options.sockets_per_peer;
  info.tcp_congestion = options.tcp_congestion;
  info.timeout_s = std::chrono::duration<double>(options.timeout).count();
  info.compare = plan.compare;
  return info;
}

// The cost model's prediction for a row of --algo all (the backend is "arcoll/<algorithm>"),
// of the row's collective. A 16-bit wire halves the f32 bytes the model sees.
Row with_prediction(const arcoll::Communicator& comm, const SweepPlan& plan, const Row& row) {
  Row out = row;
  const std::string algorithm = row.backend.substr(row.backend.find('/') + 1);
  const bool narrowed = algorithm != "ps" && plan.options.wire != arcoll::DataType::f32 &&
                        row.type == arcoll::DataType::f32;
  const std::size_t bytes = narrowed ? row.size_bytes / 2 : row.size_bytes;
  const arcoll::Prediction p =
      algorithm == "ps" ? comm.predict_parameter_server(bytes, plan.ps_servers, plan.ps_piece_bytes)
                        : comm.predict(std::string(to_string(row.coll)), bytes, algorithm);
  out.predicted_us = p.seconds * 1e6;
  if (algorithm == "auto") out.predicted_algorithm = p.algorithm;
  return out;
}

// The sweep on one rank. Rank 0 prints the table and writes the files; its exit code is 1
// when a result was wrong or a file could not be written.
// `job` holds the workers (`comm`) and, last, --ps-servers dedicated servers.
int benchmark(arcoll::Communicator& comm, arcoll::Communicator& job, const SweepPlan& plan) {
  const bool root = comm.rank() == 0;
  // The cost model that `auto` and the predictions use: this host's link costs, measured on
  // its first run of this layout and kept, unless a tuning file gives them.
  std::string link_costs = "link costs from " + comm.options().tuning_file;
  if (comm.options().tuning_file.empty()) {
    arcoll::CalibratedTuning calibrated = arcoll::calibrated_tuning(comm, plan.calibration);
    if (!calibrated.tuning.transports.empty()) comm.set_tuning(calibrated.tuning);
    link_costs = calibrated.source;
  }

  // Every rank creates the same backends in the same order (their setup is collective).
  std::vector<std::unique_ptr<Backend>> owned;
  std::vector<Backend*> backends;
  std::vector<std::string> unavailable;
  for (const std::string& algorithm : plan.algorithms) {
    owned.push_back(algorithm == "ps" ? make_parameter_server_backend(comm, job, plan.ps_servers,
                                                                      plan.ps_piece_bytes)
                                      : make_arcoll_backend(comm, algorithm));
    backends.push_back(owned.back().get());
  }
  for (const std::string& name :
       plan.algorithms.empty() ? plan.backends : std::vector<std::string>{}) {
    try {
      if (name.starts_with(kArcollOver)) {
        arcoll::Options options = comm.options();
        options.transport = name.substr(std::string(kArcollOver).size());
        owned.push_back(make_arcoll_backend_over(comm, options, plan.calibration));
      } else {
        owned.push_back(make_backend(name, comm, plan.backend_options));
      }
      backends.push_back(owned.back().get());
    } catch (const BackendUnavailable& e) {
      if (!plan.compare) {  // the one backend asked for cannot run here: nothing to measure
        if (root) print("SKIPPED: " + std::string(e.what()) + " [--backend " + name + "]\n");
        return 0;
      }
      unavailable.push_back("# SKIPPED: " + name + ": " + e.what() + "\n");
    } catch (const BackendUsageError& e) {
      if (root) std::fprintf(stderr, "arbench: %s\n", e.what());
      return kUsageError;
    }
  }

  // --device: arcoll's calls run on that device's buffers (the peers that compute there, NCCL,
  // always do). Every rank fails alike when one has no such device.
  if (plan.sweep.device != "host") {
    const DeviceRegistration& device = *DeviceRegistry::instance().find(plan.sweep.device);
    try {
      for (auto& backend : owned)
        if (backend->is_arcoll()) {
          Backend* host = backend.get();
          backend = device.wrap(std::move(backend), comm);
          std::replace(backends.begin(), backends.end(), host, backend.get());
        }
    } catch (const BackendUnavailable& e) {
      if (root) std::fprintf(stderr, "arbench: --device %s: %s\n", device.name.c_str(), e.what());
      return 1;
    }
  }

  RunInfo info = describe_run(comm, plan);
  info.link_costs = link_costs;
  info.algorithms = !plan.algorithms.empty();
  for (Backend* backend : backends)
    info.backends.push_back({backend->name(), backend->description(), backend->reduces()});
  if (root) {
    print(table_header(info));
    for (const std::string& line : unavailable) print(line);
  }

  Progress progress(root && ::isatty(STDERR_FILENO) == 1);
  SweepCallbacks callbacks;
  Coll previous_coll = Coll::allreduce;
  if (root) {
    callbacks.before = [&](const Row& row, std::size_t index, std::size_t total) {
      const int width = static_cast<int>(std::to_string(total).size());
      char prefix[64];
      std::snprintf(prefix, sizeof prefix, "[%*zu/%zu] ", width, index + 1, total);
      // Where each collective's rows begin, when the sweep has several.
      if (plan.sweep.colls.size() > 1 && (index == 0 || row.coll != previous_coll)) {
        progress.clear();
        print(collective_line(row.coll));
      }
      previous_coll = row.coll;
      progress.show(prefix + (plan.compare ? row.backend + " " : std::string()) +
                    std::string(to_string(row.coll)) + " " +
                    std::string(arcoll::to_string(row.type)) + " " +
                    std::string(arcoll::to_string(row.op)) + " " +
                    format_bytes(static_cast<double>(row.size_bytes)));
    };
    callbacks.pass = [&](int pass, int passes, const Row& row) {
      progress.show(
          printf_string("[pass %d/%d] ", pass, passes) + std::string(to_string(row.coll)) + " " +
          std::string(arcoll::to_string(row.type)) + " " + std::string(arcoll::to_string(row.op)) +
          " " + format_bytes(static_cast<double>(row.size_bytes)));
    };
    callbacks.skipped = [&](const std::string& backend, Coll coll, arcoll::DataType type,
                            arcoll::ReduceOp op, const std::string& reason) {
      progress.clear();
      print(skipped_line(backend, coll, type, op, reason));
    };
    if (info.algorithms) {
      callbacks.after = [&](const Row& row, std::size_t, std::size_t) {
        progress.clear();
        print(algorithms_row(with_prediction(comm, plan, row)));
      };
    } else if (!plan.compare) {
      callbacks.after = [&](const Row& row, std::size_t, std::size_t) {
        progress.clear();
        print(table_row(row));
      };
    } else {
      // One line per size, once every backend that runs this type and op has its row.
      callbacks.after = [&, pending = std::vector<Row>()](const Row& row, std::size_t,
                                                          std::size_t) mutable {
        pending.push_back(row);
        std::size_t running = 0;
        for (Backend* backend : backends)
          if (!backend->unsupported(row.coll, row.type, row.op)) ++running;
        if (pending.size() < running) return;
        progress.clear();
        print(compare_row(info, pending));
        pending.clear();
      };
    }
  }
  std::vector<Row> rows = run_sweep(comm, backends, plan.sweep, callbacks);
  progress.clear();
  if (!root) return 0;
  if (info.algorithms)
    for (Row& row : rows) row = with_prediction(comm, plan, row);

  const Summary summary = summarize(rows);
  if (plan.first_run) {
    // The first run compares itself with this host's earlier ones, and is kept for later ones.
    EarlierRuns earlier = load_earlier_runs(info);
    print(compare_footer(info, rows, all_ratios(earlier)));
    keep_run(earlier, info, steady_ratios(info, rows));
  } else {
    print(plan.compare ? compare_footer(info, rows) : table_footer(summary));
  }
  int status = 0;
  try {
    if (!plan.json_path.empty()) write_atomically(plan.json_path, json_report(info, rows, summary));
    if (!plan.csv_path.empty()) write_atomically(plan.csv_path, csv_report(info, rows));
  } catch (const std::runtime_error& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    status = 1;
  }
  if (summary.out_of_bounds > 0) {
    std::fprintf(stderr, "arbench: %d result(s) differ from the reference\n",
                 summary.out_of_bounds);
    status = 1;
  }
  if (plan.min_busbw_gbs && summary.avg_busbw_gbs < *plan.min_busbw_gbs) {
    print(
        printf_string("# FAILED: average bus bandwidth %.3f GB/s is below --min-busbw %.3f GB/s\n",
                      summary.avg_busbw_gbs, *plan.min_busbw_gbs));
    status = 1;
  }
  return status;
}

// One rank from start to end. `launch` is known under an external launcher; forked ranks
// detect theirs. `outputs_checked`: the parent already made sure the files can be written.
int run_rank(const SweepPlan& plan, const std::optional<arcoll::LaunchInfo>& known,
             bool outputs_checked) {
  std::string who = "arbench";
  try {
    const arcoll::LaunchInfo launch = known ? *known : arcoll::detect_launch();
    who = "arbench: rank " + std::to_string(launch.rank);
    std::unique_ptr<arcoll::Communicator> joined;
    try {
      joined = std::make_unique<arcoll::Communicator>(launch, plan.options);
    } catch (const arcoll::Error& e) {
      // An unknown --transport or --algo is a bad flag value, like an unknown type.
      std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
      const bool bad_value = e.code() == arcoll::ErrorCode::invalid_argument ||
                             e.code() == arcoll::ErrorCode::configuration;
      return bad_value ? kUsageError : 1;
    }
    // --ps-servers: the job's last ranks only serve --algo ps; the workers sweep.
    arcoll::Communicator& job = *joined;
    std::unique_ptr<arcoll::Communicator> workers;
    if (plan.ps_servers > 0) {
      if (job.size() <= plan.ps_servers)
        throw UsageError("--ps-servers " + std::to_string(plan.ps_servers) +
                         " leaves no worker in " + std::to_string(job.size()) + " ranks");
      const bool server = job.rank() >= job.size() - plan.ps_servers;
      workers = job.split(server ? -1 : 0);
      if (server) {
        arcoll::ParameterServer(
            job, sweep_parameter_server_options(job, plan.ps_servers, plan.ps_piece_bytes))
            .serve();
        return 0;
      }
    }
    arcoll::Communicator& comm = workers ? *workers : job;
    if (!outputs_checked) {
      // Only rank 0 writes; it tells the others whether to go on.
      std::int32_t bad = 0;
      if (comm.rank() == 0)
        if (auto error = unwritable_output(plan)) {
          std::fprintf(stderr, "arbench: %s\n", error->c_str());
          bad = 1;
        }
      comm.broadcast(&bad, 1, arcoll::DataType::i32, 0);
      if (bad != 0) return kUsageError;
    }
    return benchmark(comm, job, plan);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return 1;
  }
}

}  // namespace

int run_sweep_command(const SweepFlags& flags, int argc, const char* const* argv) {
  SweepPlan plan;
  arcoll::LaunchInfo here;
  try {
    plan = make_plan(flags, argc, argv);
    try {
      here = arcoll::detect_launch();
    } catch (const arcoll::Error& e) {
      throw UsageError(e.what());
    }
    if (here.source != "default") {
      if (plan.np && *plan.np + plan.ps_servers != here.world_size)
        throw UsageError("--np " + std::to_string(*plan.np) + " and --ps-servers " +
                         std::to_string(plan.ps_servers) + " disagree with the world size " +
                         std::to_string(here.world_size) + " set by " + here.source);
    } else if (auto error = unwritable_output(plan)) {
      throw UsageError(*error);
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    return kUsageError;
  }

  if (here.source != "default") return run_rank(plan, here, /*outputs_checked=*/false);

  const int ranks =
      plan.np.value_or(std::max(2, std::min(8, arcoll::host_info().cores))) + plan.ps_servers;
  for (const std::string& name : plan.backends)
    if (backend_needs_mpirun(name) && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr)
      return reexec_under_mpirun(plan.mpirun_args, ranks, argc, argv);

  std::vector<arcoll::RankExit> exits;
  try {
    exits = arcoll::run_local_ranks(local_launch(ranks), [&] {
      return run_rank(plan, std::nullopt, /*outputs_checked=*/true);
    });
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    return 1;
  }
  return exit_status(exits);
}

}  // namespace arbench
