// arbench: allreduce benchmark with nccl-tests' all_reduce_perf columns.
//
// Without a launcher it forks --np ranks on this host; under mpirun, srun, torchrun or with
// ARCOLL_RANK set it runs as the rank the environment describes. The plain sweep is the
// default command; further tools become CLI11 subcommands (see `Subcommand`).
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arbench/backends/backend.hpp"
#include "arbench/cli.hpp"
#include "arbench/compare.hpp"
#include "arbench/html_report.hpp"
#include "arbench/links.hpp"
#include "arbench/models.hpp"
#include "arbench/plot.hpp"
#include "arbench/replay_command.hpp"
#include "arbench/report.hpp"
#include "arbench/sweep.hpp"
#include "arcoll/cluster.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/host.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/local_launcher.hpp"
#include "arcoll/options.hpp"
#include "arcoll/topology.hpp"
#include "arcoll/tuning.hpp"
#include "arcoll/types.hpp"

namespace {

using arbench::add_tool_flags;
using arbench::exit_status;
using arbench::find_on_path;
using arbench::kUsageError;
using arbench::parse_integer;
using arbench::parse_size;
using arbench::print;
using arbench::quoted;
using arbench::run_tool;
using arbench::split_list;
using arbench::ToolFlags;
using arbench::UsageError;

constexpr std::size_t kMaxSizes = 100'000;

// The sweep's flags as typed; validated by make_plan.
struct SweepFlags {
  std::string min_bytes = "8";
  std::string max_bytes = "128M";
  std::string step_factor = "4";
  std::string step_bytes;
  std::string np;
  std::string warmup_iters = "5";
  std::string iters = "20";
  std::string repeat = "1";
  std::string min_busbw;
  std::string datatype = "f32";
  std::string op = "sum";
  std::string algo;
  std::string transport;
  std::string chunk;
  std::string channels;
  std::string wire;
  std::string tuning;
  std::string sockets;
  std::string check = "1";
  std::string json;
  std::string csv;
  std::string timeout;
  std::string backend = "arcoll";
  std::string compare;
  bool memcpy = false;
  std::string gloo_algo = "ring_chunked";
  std::string mpirun_args = "--mca pml ob1 --mca btl self,vader,tcp";
  // Which of them were given on the command line.
  CLI::Option* step_factor_option = nullptr;
  CLI::Option* step_bytes_option = nullptr;
};

// Everything a rank needs to run the sweep.
struct Plan {
  arbench::SweepSettings sweep;
  std::size_t min_bytes = 0;
  std::size_t max_bytes = 0;
  std::optional<std::size_t> step_factor;
  std::optional<std::size_t> step_bytes;
  std::optional<int> np;
  arcoll::Options options;
  std::string json_path;
  std::string csv_path;
  std::string command_line;
  // Backends in table order: arcoll first under --compare.
  std::vector<std::string> backends = {"arcoll"};
  // --algo all or a list: each all-reduce algorithm against the cost model.
  std::vector<std::string> algorithms;
  bool compare = false;
  arbench::BackendOptions backend_options;
  std::string mpirun_args;
  std::optional<double> min_busbw_gbs;  // --min-busbw: the health gate
};

// "all" or a comma-separated list of names `parse` accepts.
template <typename T, typename Parse, std::size_t N>
std::vector<T> parse_names(const char* flag, const std::string& text, Parse parse,
                           const T (&all)[N]) {
  if (text == "all") return std::vector<T>(std::begin(all), std::end(all));
  std::vector<T> values;
  for (const std::string& name : split_list(text)) {
    auto value = parse(name);
    if (!value) {
      std::string known;
      for (T v : all) known += std::string(arcoll::to_string(v)) + ", ";
      throw UsageError(std::string(flag) + ": unknown name " + quoted(name) + " (known: " + known +
                       "all)");
    }
    values.push_back(*value);
  }
  return values;
}

Plan make_plan(const SweepFlags& flags, int argc, const char* const* argv) {
  Plan plan;
  plan.command_line = arbench::shell_command_line(argc, argv);
  plan.min_bytes = parse_size("-b/--minbytes", flags.min_bytes);
  plan.max_bytes = parse_size("-e/--maxbytes", flags.max_bytes);
  if (plan.min_bytes > plan.max_bytes)
    throw UsageError("-b/--minbytes " + flags.min_bytes + " is larger than -e/--maxbytes " +
                     flags.max_bytes);

  // nccl-tests: a factor above 1 multiplies, otherwise the step (default 1M) adds.
  const auto factor =
      static_cast<std::size_t>(parse_integer("-f/--stepfactor", flags.step_factor, 1, 1 << 20));
  const bool factor_given = flags.step_factor_option->count() > 0;
  const bool step_given = flags.step_bytes_option->count() > 0;
  if (step_given && factor_given && factor > 1)
    throw UsageError("-i/--stepbytes " + flags.step_bytes + " and -f/--stepfactor " +
                     flags.step_factor + " contradict each other; give one of them");
  if (step_given || factor == 1) {
    const std::size_t step = step_given ? parse_size("-i/--stepbytes", flags.step_bytes) : 1 << 20;
    if (step == 0) throw UsageError("-i/--stepbytes: the step must be at least one byte");
    plan.step_bytes = step;
  } else {
    plan.step_factor = factor;
  }
  if (plan.step_bytes && (plan.max_bytes - plan.min_bytes) / *plan.step_bytes >= kMaxSizes)
    throw UsageError("the sweep from -b " + flags.min_bytes + " to -e " + flags.max_bytes +
                     " in steps of " + std::to_string(*plan.step_bytes) + " bytes has more than " +
                     std::to_string(kMaxSizes) + " sizes; use a larger -i/--stepbytes or -f");
  plan.sweep.sizes = arbench::sweep_sizes(
      plan.min_bytes, plan.max_bytes, plan.step_factor.value_or(1), plan.step_bytes.value_or(0));

  if (!flags.np.empty()) plan.np = static_cast<int>(parse_integer("--np", flags.np, 1, 4096));
  plan.sweep.warmup_iters =
      static_cast<int>(parse_integer("-w/--warmup_iters", flags.warmup_iters, 0, 1'000'000));
  plan.sweep.iters = static_cast<int>(parse_integer("-n/--iters", flags.iters, 1, 1'000'000));
  plan.sweep.repeat = static_cast<int>(parse_integer("--repeat", flags.repeat, 1, 10'000));
  if (!flags.min_busbw.empty()) {
    char* end = nullptr;
    const double gbs = std::strtod(flags.min_busbw.c_str(), &end);
    if (end == flags.min_busbw.c_str() || *end != '\0' || !(gbs >= 0) || !std::isfinite(gbs))
      throw UsageError("--min-busbw: " + quoted(flags.min_busbw) +
                       " is not a bandwidth in GB/s (a number >= 0)");
    plan.min_busbw_gbs = gbs;
  }
  plan.sweep.check = parse_integer("-c/--check", flags.check, 0, 1) == 1;

  plan.sweep.types =
      parse_names("-d/--datatype", flags.datatype, arcoll::parse_data_type, arcoll::kAllDataTypes);
  plan.sweep.ops = parse_names("-o/--op", flags.op, arcoll::parse_reduce_op, arcoll::kAllReduceOps);
  // Named explicitly, every pair must make sense; with "all" the others are skipped.
  if (flags.datatype != "all" && flags.op != "all")
    for (auto type : plan.sweep.types)
      for (auto op : plan.sweep.ops)
        if (!arcoll::is_supported(type, op))
          throw UsageError("-o/--op " + std::string(arcoll::to_string(op)) +
                           " is not defined for -d/--datatype " +
                           std::string(arcoll::to_string(type)));
  if (arbench::row_count(plan.sweep) == 0)
    throw UsageError("-d/--datatype " + flags.datatype + " and -o/--op " + flags.op +
                     " leave nothing to run");

  try {
    plan.options = arcoll::Options::from_env();
  } catch (const arcoll::Error& e) {
    throw UsageError(e.what());
  }
  if (flags.algo == "all") {
    plan.algorithms = arcoll::Communicator::allreduce_algorithms();
    plan.algorithms.push_back("auto");
  } else if (flags.algo.find(',') != std::string::npos) {
    const auto known = arcoll::Communicator::allreduce_algorithms();
    for (const std::string& name : split_list(flags.algo)) {
      if (name != "auto" && std::find(known.begin(), known.end(), name) == known.end())
        throw UsageError("--algo: unknown algorithm " + quoted(name) + " (known: auto, " + [&] {
          std::string list;
          for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
          return list;
        }() + ", all)");
      plan.algorithms.push_back(name);
    }
  } else if (!flags.algo.empty()) {
    plan.options.algorithm = flags.algo;
  }
  if (!flags.channels.empty())
    plan.options.channels = static_cast<int>(parse_integer("--channels", flags.channels, 1, 64));
  if (!flags.wire.empty()) {
    auto wire = arcoll::parse_data_type(flags.wire);
    if (!wire || (*wire != arcoll::DataType::f32 && *wire != arcoll::DataType::f16 &&
                  *wire != arcoll::DataType::bf16))
      throw UsageError("--wire: " + quoted(flags.wire) + " is not f32, f16 or bf16");
    plan.options.wire = *wire;
  }
  plan.sweep.wire = plan.options.wire;
  if (!flags.tuning.empty()) plan.options.tuning_file = flags.tuning;
  if (!plan.options.tuning_file.empty()) {
    try {
      arcoll::load_tuning(
          plan.options.tuning_file);  // a bad file is a usage error, before ranks start
    } catch (const arcoll::Error& e) {
      throw UsageError((flags.tuning.empty() ? "ARCOLL_TUNING_FILE: " : "--tuning: ") +
                       e.message());
    }
  }
  if (!flags.transport.empty()) plan.options.transport = flags.transport;
  if (!flags.chunk.empty()) {
    plan.options.chunk_bytes = parse_size("--chunk", flags.chunk);
    if (plan.options.chunk_bytes == 0) throw UsageError("--chunk: the chunk must not be empty");
  }
  if (!flags.sockets.empty())
    plan.options.sockets_per_peer =
        static_cast<int>(parse_integer("--sockets", flags.sockets, 1, 64));
  if (!flags.timeout.empty()) {
    char* end = nullptr;
    const double seconds = std::strtod(flags.timeout.c_str(), &end);
    if (end == flags.timeout.c_str() || *end != '\0' || !(seconds > 0) || !std::isfinite(seconds))
      throw UsageError("--timeout: " + quoted(flags.timeout) +
                       " is not a positive number of seconds");
    plan.options.timeout =
        std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
  }
  plan.json_path = flags.json;
  plan.csv_path = flags.csv;

  plan.backend_options.gloo_algorithm = flags.gloo_algo;
  if (std::find(std::begin(arbench::kGlooAlgorithms), std::end(arbench::kGlooAlgorithms),
                flags.gloo_algo) == std::end(arbench::kGlooAlgorithms))
    throw UsageError("--gloo-algo: unknown algorithm " + quoted(flags.gloo_algo) +
                     " (known: ring, ring_chunked, halving_doubling, bcube)");
  plan.mpirun_args = flags.mpirun_args;
  std::string compare = flags.compare;
  if (flags.memcpy) compare += compare.empty() ? "memcpy" : ",memcpy";
  if (!compare.empty() && !plan.algorithms.empty())
    throw UsageError("--algo all and --compare make different tables; give one of them");
  if (!compare.empty()) {
    if (flags.backend != "arcoll")
      throw UsageError("--compare runs arcoll against the backends it names; drop --backend " +
                       flags.backend);
    plan.compare = true;
    for (const std::string& name : split_list(compare))
      if (name != "arcoll" &&
          std::find(plan.backends.begin(), plan.backends.end(), name) == plan.backends.end())
        plan.backends.push_back(name);
  } else {
    plan.backends = {flags.backend};
  }
  for (const std::string& name : plan.backends) {
    try {
      arbench::check_backend_built(name);
    } catch (const arbench::BackendUsageError& e) {
      throw UsageError((plan.compare ? "--compare: " : "--backend: ") + std::string(e.what()));
    }
  }
  return plan;
}

// The first output file that cannot be written, as a message.
std::optional<std::string> unwritable_output(const Plan& plan) {
  if (!plan.json_path.empty())
    if (auto error = arbench::check_writable("--json", plan.json_path)) return error;
  if (!plan.csv_path.empty())
    if (auto error = arbench::check_writable("--csv", plan.csv_path)) return error;
  return std::nullopt;
}

// Where every rank runs, gathered from all of them (a collective call).
arbench::RunInfo describe_run(arcoll::Communicator& comm, const Plan& plan) {
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

  arbench::RunInfo info;
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
  info.date = arbench::utc_now();
  info.command_line = plan.command_line;
  info.min_bytes = plan.min_bytes;
  info.max_bytes = plan.max_bytes;
  info.step_factor = plan.step_factor;
  info.step_bytes = plan.step_bytes;
  info.sweep = plan.sweep;
  const arcoll::Options& options = comm.options();
  info.chunk_bytes = options.chunk_bytes;
  info.sockets_per_peer = options.sockets_per_peer;
  info.timeout_s = std::chrono::duration<double>(options.timeout).count();
  info.compare = plan.compare;
  return info;
}

// The cost model's prediction for a row of --algo all (the backend is "arcoll/<algorithm>").
// A 16-bit wire halves the f32 bytes the model sees.
arbench::Row with_prediction(const arcoll::Communicator& comm, const Plan& plan,
                             const arbench::Row& row) {
  arbench::Row out = row;
  const std::string algorithm = row.backend.substr(row.backend.find('/') + 1);
  const bool narrowed =
      plan.options.wire != arcoll::DataType::f32 && row.type == arcoll::DataType::f32;
  const arcoll::AllreducePrediction p =
      comm.predict_allreduce(narrowed ? row.size_bytes / 2 : row.size_bytes, algorithm);
  out.predicted_us = p.seconds * 1e6;
  if (algorithm == "auto") out.predicted_algorithm = p.algorithm;
  return out;
}

// The sweep on one rank. Rank 0 prints the table and writes the files; its exit code is 1
// when a result was wrong or a file could not be written.
int benchmark(arcoll::Communicator& comm, const Plan& plan) {
  const bool root = comm.rank() == 0;

  // Every rank creates the same backends in the same order (their setup is collective).
  std::vector<std::unique_ptr<arbench::Backend>> owned;
  std::vector<arbench::Backend*> backends;
  std::vector<std::string> unavailable;
  for (const std::string& algorithm : plan.algorithms) {
    owned.push_back(arbench::make_arcoll_backend(comm, algorithm));
    backends.push_back(owned.back().get());
  }
  for (const std::string& name :
       plan.algorithms.empty() ? plan.backends : std::vector<std::string>{}) {
    try {
      owned.push_back(arbench::make_backend(name, comm, plan.backend_options));
      backends.push_back(owned.back().get());
    } catch (const arbench::BackendUnavailable& e) {
      if (!plan.compare) {  // the one backend asked for cannot run here: nothing to measure
        if (root) print("SKIPPED: " + std::string(e.what()) + " [--backend " + name + "]\n");
        return 0;
      }
      unavailable.push_back("# SKIPPED: " + name + ": " + e.what() + "\n");
    } catch (const arbench::BackendUsageError& e) {
      if (root) std::fprintf(stderr, "arbench: %s\n", e.what());
      return kUsageError;
    }
  }

  arbench::RunInfo info = describe_run(comm, plan);
  info.algorithms = !plan.algorithms.empty();
  for (arbench::Backend* backend : backends)
    info.backends.push_back({backend->name(), backend->description()});
  if (root) {
    print(arbench::table_header(info));
    for (const std::string& line : unavailable) print(line);
  }

  arbench::Progress progress(root && ::isatty(STDERR_FILENO) == 1);
  arbench::SweepCallbacks callbacks;
  if (root) {
    callbacks.before = [&](const arbench::Row& row, std::size_t index, std::size_t total) {
      const int width = static_cast<int>(std::to_string(total).size());
      char prefix[64];
      std::snprintf(prefix, sizeof prefix, "[%*zu/%zu] ", width, index + 1, total);
      progress.show(prefix + (plan.compare ? row.backend + " " : std::string()) +
                    std::string(arcoll::to_string(row.type)) + " " +
                    std::string(arcoll::to_string(row.op)) + " " +
                    arbench::format_bytes(static_cast<double>(row.size_bytes)));
    };
    callbacks.skipped = [&](const std::string& backend, arcoll::DataType type, arcoll::ReduceOp op,
                            const std::string& reason) {
      progress.clear();
      print(arbench::skipped_line(backend, type, op, reason));
    };
    if (info.algorithms) {
      callbacks.after = [&](const arbench::Row& row, std::size_t, std::size_t) {
        progress.clear();
        print(arbench::algorithms_row(with_prediction(comm, plan, row)));
      };
    } else if (!plan.compare) {
      callbacks.after = [&](const arbench::Row& row, std::size_t, std::size_t) {
        progress.clear();
        print(arbench::table_row(row));
      };
    } else {
      // One line per size, once every backend that runs this type and op has its row.
      callbacks.after = [&, pending = std::vector<arbench::Row>()](
                            const arbench::Row& row, std::size_t, std::size_t) mutable {
        pending.push_back(row);
        std::size_t running = 0;
        for (arbench::Backend* backend : backends)
          if (!backend->unsupported(row.type, row.op)) ++running;
        if (pending.size() < running) return;
        progress.clear();
        print(arbench::compare_row(info, pending));
        pending.clear();
      };
    }
  }
  std::vector<arbench::Row> rows = arbench::run_sweep(comm, backends, plan.sweep, callbacks);
  progress.clear();
  if (!root) return 0;
  if (info.algorithms)
    for (arbench::Row& row : rows) row = with_prediction(comm, plan, row);

  const arbench::Summary summary = arbench::summarize(rows);
  print(plan.compare ? arbench::compare_footer(info, rows) : arbench::table_footer(summary));
  int status = 0;
  try {
    if (!plan.json_path.empty())
      arbench::write_atomically(plan.json_path, arbench::json_report(info, rows, summary));
    if (!plan.csv_path.empty())
      arbench::write_atomically(plan.csv_path, arbench::csv_report(info, rows));
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
    print(arbench::printf_string(
        "# FAILED: average bus bandwidth %.3f GB/s is below --min-busbw %.3f GB/s\n",
        summary.avg_busbw_gbs, *plan.min_busbw_gbs));
    status = 1;
  }
  return status;
}

// One rank from start to end. `launch` is known under an external launcher; forked ranks
// detect theirs. `outputs_checked`: the parent already made sure the files can be written.
int run_rank(const Plan& plan, const std::optional<arcoll::LaunchInfo>& known,
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
    arcoll::Communicator& comm = *joined;
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
    return benchmark(comm, plan);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return 1;
  }
}

// Splits --mpirun-args on blanks (no quoting: MPI's flags do not need it).
std::vector<std::string> split_blanks(const std::string& text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

// MPI backends need ranks that mpirun started: run this same command line under
// `mpirun --allow-run-as-root --oversubscribe -np N <--mpirun-args> arbench ...`.
// Returns only on failure.
int reexec_under_mpirun(const Plan& plan, int ranks, int argc, const char* const* argv) {
  const auto mpirun = find_on_path("mpirun");
  if (!mpirun) {
    std::fprintf(stderr,
                 "arbench: --backend mpi needs its ranks started by mpirun, and no mpirun is on "
                 "PATH (install openmpi-bin, or start arbench under your MPI's launcher)\n");
    return kUsageError;
  }
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::vector<std::string> args = {*mpirun, "--allow-run-as-root", "--oversubscribe", "-np",
                                   std::to_string(ranks)};
  for (std::string& word : split_blanks(plan.mpirun_args)) args.push_back(std::move(word));
  args.push_back(n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(argv[0]));
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  std::fflush(stdout);
  ::execv(mpirun->c_str(), c_args.data());
  std::fprintf(stderr, "arbench: cannot run %s: %s\n", mpirun->c_str(), std::strerror(errno));
  return 1;
}

// `arbench tune`: measures each transport's link costs between the ranks at hand and writes
// the tuning file that --tuning (ARCOLL_TUNING_FILE) reads.
int run_tune_command(const ToolFlags& flags, const std::string& output) {
  return run_tool(
      "tune", flags, 2, 2, [&] { return arbench::check_writable("-o/--output", output); },
      [&](arcoll::Communicator& comm) {
        const arcoll::Tuning tuning = arcoll::measure_tuning(comm);
        if (comm.rank() != 0) return 0;
        print("# arbench tune: " + tuning.measured_on + "\n# " +
              arbench::printf_string("%-10s %14s %16s %14s", "transport", "latency (us)",
                                     "bandwidth (GB/s)", "reduce (GB/s)") +
              "\n");
        for (const auto& [name, c] : tuning.transports)
          print(arbench::printf_string("  %-10s %14.2f %16.2f %14.2f\n", name.c_str(), c.latency_us,
                                       c.bandwidth_gbs, c.reduce_gbs));
        arcoll::save_tuning(tuning, output);
        print("# written to " + output + " (use it with --tuning or ARCOLL_TUNING_FILE)\n");
        return 0;
      });
}

// `arbench links`: the pairwise latency and bandwidth matrix, slow pairs flagged.
struct LinksFlags {
  std::string bytes = "1M";
  std::string threshold = "0.5";
  std::string json;
};

int run_links_command(const ToolFlags& flags, const LinksFlags& links) {
  arbench::LinkSettings settings;
  return run_tool(
      "links", flags, 2, 2,
      [&]() -> std::optional<std::string> {
        settings.large_bytes = parse_size("--bytes", links.bytes);
        if (settings.large_bytes == 0) return "--bytes: the message must not be empty";
        char* end = nullptr;
        settings.slow_fraction = std::strtod(links.threshold.c_str(), &end);
        if (end == links.threshold.c_str() || *end != '\0' || !(settings.slow_fraction > 0) ||
            !(settings.slow_fraction < 1))
          return "--threshold: " + quoted(links.threshold) + " is not a fraction between 0 and 1";
        if (!links.json.empty()) return arbench::check_writable("--json", links.json);
        return std::nullopt;
      },
      [&](arcoll::Communicator& comm) {
        const arbench::LinkMatrix matrix = arbench::measure_links(comm, settings);
        if (comm.rank() != 0) return 0;
        print("# arbench links: " + std::to_string(comm.size()) + " ranks on " +
              std::to_string(comm.node_count()) + " host(s), " + comm.transport_name() + ", " +
              arbench::format_bytes(static_cast<double>(settings.large_bytes)) +
              " messages for bandwidth\n" + arbench::links_text(matrix));
        if (!links.json.empty()) arbench::write_atomically(links.json, arbench::links_json(matrix));
        return 0;
      });
}

// `arbench topo`: this host, and with several ranks (--np, or a launcher) where every rank
// runs and the class of link between them.
int run_topo_command(const ToolFlags& flags, const std::string& json, const std::string& dot) {
  return run_tool(
      "topo", flags, 1, 1,
      [&]() -> std::optional<std::string> {
        if (!json.empty())
          if (auto error = arbench::check_writable("--json", json)) return error;
        if (!dot.empty()) return arbench::check_writable("--dot", dot);
        return std::nullopt;
      },
      [&](arcoll::Communicator& comm) {
        const arcoll::HostTopology host = arcoll::discover_host_topology();
        const arcoll::ClusterView view = arcoll::gather_cluster_view(comm, host);
        if (comm.rank() != 0) return 0;
        print(arcoll::topology_text(host));
        if (comm.size() > 1) print(arcoll::cluster_view_text(view));
        if (!json.empty()) {
          auto document = nlohmann::json::parse(arcoll::topology_json(host));
          nlohmann::json ranks = nlohmann::json::array();
          for (const arcoll::RankPlacement& r : view.ranks)
            ranks.push_back({{"rank", r.rank},
                             {"host", r.host},
                             {"cpu", r.cpu},
                             {"numa_node", r.numa_node},
                             {"nic", r.nic},
                             {"nic_speed_mbps", r.nic_speed_mbps},
                             {"gpus", r.gpus}});
          document["cluster"] = {{"hosts", view.hosts}, {"ranks", ranks}};
          arbench::write_atomically(json, document.dump(2) + "\n");
        }
        if (!dot.empty()) arbench::write_atomically(dot, arcoll::cluster_view_dot(view));
        return 0;
      });
}

// `arbench plan --topology FILE`: every algorithm's predicted time on a described cluster, size
// by size, and what auto would run: planning for hardware we do not have.
struct PlanFlags {
  std::string topology;
  std::string hosts = "1";
  std::string min_bytes = "8";
  std::string max_bytes = "1G";
  std::string step_factor = "4";
};

int run_plan_command(const PlanFlags& flags) {
  arcoll::ClusterSpec cluster;
  std::vector<std::size_t> sizes;
  try {
    const int hosts = static_cast<int>(parse_integer("--hosts", flags.hosts, 1, 1 << 20));
    const std::size_t min = parse_size("-b/--minbytes", flags.min_bytes);
    const std::size_t max = parse_size("-e/--maxbytes", flags.max_bytes);
    const auto factor =
        static_cast<std::size_t>(parse_integer("-f/--stepfactor", flags.step_factor, 2, 1 << 20));
    if (min > max) throw UsageError("-b/--minbytes is larger than -e/--maxbytes");
    sizes = arbench::sweep_sizes(std::max<std::size_t>(min, 1), max, factor, 0);
    try {
      cluster = arcoll::load_cluster(flags.topology, hosts);
    } catch (const arcoll::Error& e) {
      throw UsageError("--topology: " + e.message());
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench plan: %s\n", e.what());
    return kUsageError;
  }
  const int ranks = cluster.hosts * cluster.ranks_per_host;
  print(arbench::printf_string("# arbench plan: %s\n", cluster.name.c_str()));
  print(arbench::printf_string(
      "# %d host(s) x %d rank(s) = %d ranks; within a host %s: %g us, %g GB/s; "
      "between hosts %s: %g us, %g GB/s per host (%d NIC(s)); reduce %g GB/s\n",
      cluster.hosts, cluster.ranks_per_host, ranks, cluster.intra_host.kind.c_str(),
      cluster.intra_host.latency_us, cluster.intra_host.bandwidth_gbs, cluster.network.kind.c_str(),
      cluster.network.latency_us, cluster.network.bandwidth_gbs, cluster.nics_per_host,
      cluster.intra_host.reduce_gbs));
  print(
      "# predicted time of one all-reduce (us) per algorithm; auto: the model's choice, its "
      "time and busbw (GB/s, nccl-tests' definition)\n");
  std::string header = arbench::printf_string("# %10s", "size (B)");
  for (const std::string& name : arcoll::Communicator::allreduce_algorithms())
    header += arbench::printf_string(" %12.12s", name.c_str());
  print(header + arbench::printf_string("  %-20s %10s %8s\n", "auto", "time", "busbw"));
  for (std::size_t bytes : sizes) {
    const arcoll::ClusterPlan plan = arcoll::plan_allreduce(cluster, bytes);
    std::string line = arbench::printf_string("%12zu", bytes);
    for (const auto& p : plan.algorithms)
      line += arbench::printf_string(" %12.4g", p.seconds * 1e6);
    const double busbw = ranks > 1 ? static_cast<double>(bytes) / plan.chosen.seconds / 1e9 * 2.0 *
                                         (ranks - 1) / ranks
                                   : 0.0;
    print(line + arbench::printf_string("  %-20s %10.4g %8.2f\n", plan.chosen.algorithm.c_str(),
                                        plan.chosen.seconds * 1e6, busbw));
  }
  return 0;
}

int run_sweep_command(const SweepFlags& flags, int argc, const char* const* argv) {
  Plan plan;
  arcoll::LaunchInfo here;
  try {
    plan = make_plan(flags, argc, argv);
    try {
      here = arcoll::detect_launch();
    } catch (const arcoll::Error& e) {
      throw UsageError(e.what());
    }
    if (here.source != "default") {
      if (plan.np && *plan.np != here.world_size)
        throw UsageError("--np " + std::to_string(*plan.np) + " disagrees with the world size " +
                         std::to_string(here.world_size) + " set by " + here.source);
    } else if (auto error = unwritable_output(plan)) {
      throw UsageError(*error);
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    return kUsageError;
  }

  if (here.source != "default") return run_rank(plan, here, /*outputs_checked=*/false);

  const int ranks = plan.np.value_or(std::max(2, std::min(8, arcoll::host_info().cores)));
  for (const std::string& name : plan.backends)
    if (arbench::backend_needs_mpirun(name) && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr)
      return reexec_under_mpirun(plan, ranks, argc, argv);

  arcoll::LocalLaunchOptions launch;
  launch.ranks = ranks;
  launch.output = arcoll::RankOutput::forward;
  std::vector<arcoll::RankExit> exits;
  try {
    exits = arcoll::run_local_ranks(
        launch, [&] { return run_rank(plan, std::nullopt, /*outputs_checked=*/true); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    return 1;
  }
  return exit_status(exits);
}

void add_sweep_flags(CLI::App& app, SweepFlags& flags) {
  // Every value is taken as text and validated by make_plan, for messages that name the flag.
  auto add = [&](const char* names, std::string& value, const char* type, const char* help) {
    return app.add_option(names, value, help)->type_name(type);
  };
  add("-b,--minbytes", flags.min_bytes, "SIZE", "Smallest size in bytes (K/M/G suffixes)")
      ->capture_default_str();
  add("-e,--maxbytes", flags.max_bytes, "SIZE", "Largest size in bytes (K/M/G suffixes)")
      ->capture_default_str();
  flags.step_factor_option = add("-f,--stepfactor", flags.step_factor, "N",
                                 "Multiply the size by N each step (1: add -i instead)")
                                 ->capture_default_str();
  flags.step_bytes_option = add("-i,--stepbytes", flags.step_bytes, "SIZE",
                                "Add SIZE bytes each step instead (default 1M with -f 1)");
  add("--np", flags.np, "N",
      "Ranks to fork on this host (default: online cores, 2 to 8); under a launcher it must match "
      "the world size");
  add("-w,--warmup_iters", flags.warmup_iters, "N", "Untimed iterations before each timing")
      ->capture_default_str();
  add("-n,--iters", flags.iters, "N", "Timed iterations")->capture_default_str();
  add("--repeat", flags.repeat, "R",
      "Time each size R times (-n iterations each): the median is reported, and min, max, p99 "
      "and the coefficient of variation go to the JSON and a cv(%) column, for arbench compare")
      ->capture_default_str();
  add("--min-busbw", flags.min_busbw, "GB/s",
      "Fail (exit 1, a FAILED line) when the average bus bandwidth is below this: a health gate");
  add("-d,--datatype", flags.datatype, "TYPE",
      "f32 f64 f16 bf16 i8 u8 i32 i64 (or nccl-tests' names), a comma-separated list, or all")
      ->capture_default_str();
  add("-o,--op", flags.op, "OP", "sum prod min max avg, a comma-separated list, or all")
      ->capture_default_str();
  add("--algo", flags.algo, "NAME",
      "Allreduce algorithm (default: ARCOLL_ALGO or auto); a comma-separated list, or all (every "
      "algorithm and auto): each at every size, with the cost model's prediction beside the "
      "measured time");
  add("--channels", flags.channels, "N",
      "Rings of the multi_ring algorithm (default: ARCOLL_CHANNELS or 2)");
  add("--wire", flags.wire, "TYPE",
      "Mixed precision: carry f32 as f16 or bf16, accumulate in f32 (default: ARCOLL_WIRE or "
      "f32); f32 rows then report their error");
  add("--tuning", flags.tuning, "FILE",
      "Link costs for --algo auto's cost model, as written by `arbench tune` (default: "
      "ARCOLL_TUNING_FILE or built-in)");
  add("--transport", flags.transport, "NAME", "Transport (default: ARCOLL_TRANSPORT or auto)");
  add("--chunk", flags.chunk, "SIZE",
      "Pipeline chunk in bytes, K/M suffixes (default: ARCOLL_CHUNK_BYTES or 512K)");
  add("--sockets", flags.sockets, "N",
      "TCP connections per peer (default: ARCOLL_SOCKETS_PER_PEER or 2)");
  add("-c,--check", flags.check, "0|1", "Check every result against a reference")
      ->capture_default_str();
  add("--json", flags.json, "FILE", "Write the results as JSON (docs/arbench-json.md)");
  add("--csv", flags.csv, "FILE", "Write the results as CSV, one line per row and group");
  add("--timeout", flags.timeout, "SECONDS",
      "How long any wait may last before failing (default: ARCOLL_TIMEOUT or 60)");
  add("--backend", flags.backend, "NAME",
      "What runs the allreduce: arcoll, mpi (MPI_Allreduce; re-runs itself under mpirun), gloo "
      "or nccl (GPU only)")
      ->capture_default_str();
  add("--compare", flags.compare, "LIST",
      "Run arcoll and these backends (comma-separated, e.g. mpi,gloo) size by size and print "
      "them side by side");
  app.add_flag("--memcpy", flags.memcpy,
               "Also time a single-core memcpy of each size (rank 0 alone) in the same run, and "
               "show arcoll's busbw against it (adds memcpy to --compare)");
  add("--gloo-algo", flags.gloo_algo, "NAME",
      "Gloo allreduce: ring, ring_chunked, halving_doubling or bcube")
      ->capture_default_str();
  add("--mpirun-args", flags.mpirun_args, "ARGS",
      "Extra mpirun flags when arbench starts mpirun itself (blank-separated)")
      ->capture_default_str();
}

// A tool beside the sweep: `arbench NAME ...`.
struct Subcommand {
  CLI::App* app;
  std::function<int()> run;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"arbench: allreduce benchmark with nccl-tests' all_reduce_perf columns"};
  app.set_version_flag("--version", "arbench " + std::string(arcoll::version()) + " (git " +
                                        std::string(arcoll::git_commit()) + ")");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last one wins
  SweepFlags flags;
  add_sweep_flags(app, flags);
  // Subcommands (tune, topo, links, plan, ...) register here; without one the sweep runs.
  std::vector<Subcommand> subcommands;
  ToolFlags tune_flags;
  std::string tune_output = "arcoll-tuning.json";
  CLI::App* tune = app.add_subcommand(
      "tune",
      "Measure latency, bandwidth and reduction rate of each transport between the ranks "
      "at hand and write a tuning file for the cost model behind --algo auto");
  add_tool_flags(tune, tune_flags);
  tune->add_option("-o,--output", tune_output, "Tuning file to write")
      ->type_name("FILE")
      ->capture_default_str();
  subcommands.push_back({tune, [&] { return run_tune_command(tune_flags, tune_output); }});
  ToolFlags links_flags;
  LinksFlags links;
  CLI::App* links_app = app.add_subcommand(
      "links",
      "Latency and bandwidth between every ordered pair of ranks (each rank in one pair "
      "at a time); flags pairs below a fraction of the median bandwidth");
  add_tool_flags(links_app, links_flags);
  links_app->add_option("--bytes", links.bytes, "Message size for bandwidth (K/M suffixes)")
      ->type_name("SIZE")
      ->capture_default_str();
  links_app
      ->add_option("--threshold", links.threshold,
                   "Flag pairs below this fraction of the median bandwidth")
      ->type_name("FRACTION")
      ->capture_default_str();
  links_app->add_option("--json", links.json, "Write the matrix as JSON")->type_name("FILE");
  subcommands.push_back({links_app, [&] { return run_links_command(links_flags, links); }});
  PlanFlags plan_flags;
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Predict every all-reduce algorithm on a cluster described in a file (hardware we "
      "do not have) and say which one auto would run");
  plan->add_option("--topology", plan_flags.topology,
                   "Cluster file (examples/topologies/), or a host saved by arbench topo --json")
      ->type_name("FILE")
      ->required();
  plan->add_option("--hosts", plan_flags.hosts, "Hosts, for a saved single host")
      ->type_name("N")
      ->capture_default_str();
  plan->add_option("-b,--minbytes", plan_flags.min_bytes, "Smallest size")->capture_default_str();
  plan->add_option("-e,--maxbytes", plan_flags.max_bytes, "Largest size")->capture_default_str();
  plan->add_option("-f,--stepfactor", plan_flags.step_factor, "Multiply the size by N each step")
      ->capture_default_str();
  subcommands.push_back({plan, [&] { return run_plan_command(plan_flags); }});
  ToolFlags topo_flags;
  std::string topo_json, topo_dot;
  CLI::App* topo = app.add_subcommand(
      "topo",
      "What this host has for communication: cores, NUMA nodes, caches, network "
      "interfaces, RDMA devices, GPUs (and which are missing); with several ranks, where "
      "each runs and the links between them");
  add_tool_flags(topo, topo_flags);
  topo->add_option("--json", topo_json, "Write the same as JSON")->type_name("FILE");
  topo->add_option("--dot", topo_dot, "Write a Graphviz picture of hosts, ranks, NICs and links")
      ->type_name("FILE");
  subcommands.push_back({topo, [&] { return run_topo_command(topo_flags, topo_json, topo_dot); }});
  ToolFlags replay_tool;
  arbench::ReplayFlags replay_flags;
  CLI::App* replay = app.add_subcommand(
      "replay",
      "Replay the gradient exchange of data-parallel training (compute emulated for the "
      "modelled times, all-reduces real) and report iteration time and overlap");
  add_tool_flags(replay, replay_tool);
  arbench::add_replay_flags(replay, replay_flags);
  subcommands.push_back(
      {replay, [&] { return arbench::run_replay_command(replay_tool, replay_flags); }});
  std::vector<std::string> compare_files;
  std::string threshold = "5%";
  CLI::App* compare = app.add_subcommand(
      "compare",
      "Compare two sweeps (arbench --json) row by row; exit 1 when a row's bus bandwidth fell "
      "beyond the threshold and the noise --repeat measured, or a row is missing");
  compare->add_option("files", compare_files, "BASE.json NEW.json")->expected(2)->required();
  compare->add_option("--threshold", threshold, "Change that counts, in percent")
      ->capture_default_str();
  subcommands.push_back({compare, [&] {
                           return arbench::run_compare_command(compare_files[0], compare_files[1],
                                                               threshold);
                         }});
  std::vector<std::string> plot_files;
  std::string plot_output;
  CLI::App* plot_app = app.add_subcommand(
      "plot", "Bus bandwidth and time against message size of sweeps, as SVG or PNG");
  plot_app->add_option("files", plot_files, "RESULTS.json ...")->required();
  plot_app->add_option("-o,--output", plot_output, "FILE.svg or FILE.png")->required();
  subcommands.push_back(
      {plot_app, [&] { return arbench::run_plot_command(plot_files, plot_output); }});
  std::vector<std::string> report_files;
  std::string report_output, report_baseline;
  CLI::App* report_app = app.add_subcommand(
      "report",
      "One self-contained HTML page of sweeps, replays and traces: environment, tables, "
      "charts, and the comparison against --baseline");
  report_app->add_option("files", report_files, "RESULTS.json ...")->required();
  report_app->add_option("-o,--output", report_output, "FILE.html")->required();
  report_app->add_option("--baseline", report_baseline, "Sweep to compare every sweep with")
      ->type_name("FILE");
  report_app->add_option("--threshold", threshold, "Change that counts, in percent")
      ->capture_default_str();
  subcommands.push_back({report_app, [&] {
                           return arbench::run_report_command(report_files, report_baseline,
                                                              threshold, report_output);
                         }});
  arbench::ModelsFlags models_flags;
  CLI::App* models = app.add_subcommand(
      "models",
      "The networks the replayer trains: tensors, parameters and compute of each (or of "
      "a model file), and with --layers every layer in gradient order");
  models->add_option("--model", models_flags.model, "A built-in model, or a .json/.csv file")
      ->type_name("NAME|FILE");
  models->add_option("--image-size", models_flags.image_size, "Input height and width")
      ->type_name("N");
  models->add_flag("--layers", models_flags.layers, "Print every layer");
  subcommands.push_back({models, [&] { return arbench::run_models_command(models_flags); }});
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every parse error exits 2, whatever CLI11's own code.
    return app.exit(e) == 0 ? 0 : kUsageError;
  }
  for (const Subcommand& sub : subcommands)
    if (sub.app->parsed()) return sub.run();
  return run_sweep_command(flags, argc, argv);
}
