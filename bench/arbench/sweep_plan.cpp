#include "arbench/sweep_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "arbench/cli.hpp"
#include "arbench/collectives.hpp"
#include "arbench/text.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/host.hpp"
#include "arcoll/types.hpp"

namespace arbench {
namespace {

constexpr std::size_t kMaxSizes = 100'000;
constexpr int kFirstRunPasses = 5;  // arbench without arguments

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
      for (T v : all) known += std::string(to_string(v)) + ", ";
      throw UsageError(std::string(flag) + ": unknown name " + quoted(name) + " (known: " + known +
                       "all)");
    }
    values.push_back(*value);
  }
  return values;
}

}  // namespace

SweepPlan make_plan(const SweepFlags& flags, int argc, const char* const* argv) {
  SweepPlan plan;
  plan.command_line = shell_command_line(argc, argv);
  plan.min_bytes = parse_size("-b/--minbytes", flags.min_bytes);
  plan.max_bytes = parse_size("-e/--maxbytes", flags.max_bytes);
  if (plan.min_bytes > plan.max_bytes)
    throw UsageError("-b/--minbytes " + flags.min_bytes + " is larger than -e/--maxbytes " +
                     flags.max_bytes);
  // A rank holds a send and a receive buffer of the largest size: past this host's memory the
  // run would print its header and then die allocating them.
  if (const std::uint64_t memory = arcoll::host_info().memory_bytes;
      memory > 0 && plan.max_bytes > memory / 2)
    throw UsageError("-e/--maxbytes " + flags.max_bytes + ": a rank's two buffers of " +
                     format_bytes(double(plan.max_bytes)) + " do not fit in this host's " +
                     format_bytes(double(memory)) + " of memory");

  // nccl-tests: a factor above 1 multiplies, otherwise the step (default 1M) adds.
  const auto factor =
      static_cast<std::size_t>(parse_integer("-f/--stepfactor", flags.step_factor, 1, 1 << 20));
  const bool factor_given = flags.step_factor_given;
  const bool step_given = flags.step_bytes_given;
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
  plan.sweep.sizes = sweep_sizes(plan.min_bytes, plan.max_bytes, plan.step_factor.value_or(1),
                                 plan.step_bytes.value_or(0));

  if (!flags.np.empty()) plan.np = static_cast<int>(parse_integer("--np", flags.np, 1, 4096));
  plan.sweep.warmup_iters =
      static_cast<int>(parse_integer("-w/--warmup_iters", flags.warmup_iters, 0, 1'000'000));
  // No arguments at all: the first run, which times by the clock (below 1 us, 20 iterations
  // are noise); -n keeps nccl-tests' fixed count for everyone who asks for it.
  if (flags.iters == "auto" || argc == 1)
    plan.sweep.target_seconds = kAutoTargetSeconds;
  else
    plan.sweep.iters = static_cast<int>(parse_integer("-n/--iters", flags.iters, 1, 1'000'000));
  plan.sweep.repeat = static_cast<int>(parse_integer("--repeat", flags.repeat, 1, 10'000));
  // The first run's ratios are what a newcomer takes away: they come from the medians of
  // passes spread over the run, each a fifth as long, and say where the passes disagree.
  if (argc == 1) {
    plan.first_run = true;
    plan.sweep.repeat = kFirstRunPasses;
    plan.sweep.target_seconds = kAutoTargetSeconds / kFirstRunPasses;
  }
  if (!flags.min_busbw.empty()) {
    char* end = nullptr;
    const double gbs = std::strtod(flags.min_busbw.c_str(), &end);
    if (end == flags.min_busbw.c_str() || *end != '\0' || !(gbs >= 0) || !std::isfinite(gbs))
      throw UsageError("--min-busbw: " + quoted(flags.min_busbw) +
                       " is not a bandwidth in GB/s (a number >= 0)");
    plan.min_busbw_gbs = gbs;
  }
  plan.sweep.check = parse_integer("-c/--check", flags.check, 0, 1) == 1;
  plan.sweep.shared_buffers = flags.shared_buffers;
  if (flags.device != "host" && DeviceRegistry::instance().find(flags.device) == nullptr)
    throw UsageError("--device " + quoted(flags.device) + ": " +
                     (DeviceRegistry::instance().names().empty()
                          ? std::string("this arbench knows host memory only (built without the "
                                        "CUDA toolkit)")
                          : "not host or one of: " + DeviceRegistry::instance().name_list()));
  if (flags.device != "host" && flags.shared_buffers)
    throw UsageError("--device " + flags.device +
                     " and --shared-buffers: the buffers live on "
                     "the device, not in host memory");
  plan.sweep.device = flags.device;

  plan.sweep.colls = parse_names("--coll", flags.coll, parse_coll, kAllColls);
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
  if (row_count(plan.sweep) == 0)
    throw UsageError("-d/--datatype " + flags.datatype + " and -o/--op " + flags.op +
                     " leave nothing to run");

  try {
    plan.options = arcoll::Options::from_env();
  } catch (const arcoll::Error& e) {
    throw UsageError(e.what());
  }
  // A list compares the algorithms of one collective, each beside the model's prediction; ps,
  // the parameter server's push_pull, stands beside the all-reduce algorithms.
  const bool algorithm_list =
      flags.algo == "all" || flags.algo.find(',') != std::string::npos || flags.algo == "ps";
  if (algorithm_list &&
      (plan.sweep.colls.size() != 1 || plan.sweep.colls.front() == Coll::sendrecv))
    throw UsageError(
        "--algo with a list compares the algorithms of one collective: give one --coll (not "
        "sendrecv)");
  const Coll algo_coll = plan.sweep.colls.front();
  const bool with_ps = algo_coll == Coll::allreduce;
  const auto known = algorithm_list
                         ? arcoll::Communicator::algorithms(std::string(to_string(algo_coll)))
                         : std::vector<std::string>{};
  if (flags.algo == "all") {
    plan.algorithms = known;
    if (with_ps) plan.algorithms.push_back("ps");
    plan.algorithms.push_back("auto");
  } else if (algorithm_list) {
    for (const std::string& name : split_list(flags.algo)) {
      if (name != "auto" && !(with_ps && name == "ps") &&
          std::find(known.begin(), known.end(), name) == known.end())
        throw UsageError("--algo: unknown " + std::string(to_string(algo_coll)) + " algorithm " +
                         quoted(name) + " (known: auto, " + [&] {
                           std::string list;
                           for (const auto& k : known) list += k + ", ";
                           return list;
                         }() + (with_ps ? "ps, all)" : "all)"));
      plan.algorithms.push_back(name);
    }
  } else if (!flags.algo.empty()) {
    plan.options.algorithm = flags.algo;
  }
  // The parameter server takes host buffers: --algo all on a device leaves it out.
  if (plan.sweep.device != "host" && std::erase(plan.algorithms, "ps") > 0 && flags.algo != "all")
    throw UsageError("--algo ps and --device " + plan.sweep.device +
                     ": the parameter server takes host buffers only");
  plan.ps_servers = static_cast<int>(parse_integer("--ps-servers", flags.ps_servers, 0, 4096));
  if (plan.ps_servers > 0 &&
      std::find(plan.algorithms.begin(), plan.algorithms.end(), "ps") == plan.algorithms.end())
    throw UsageError("--ps-servers serves --algo ps: add ps to --algo");
  plan.ps_piece_bytes = parse_size("--ps-piece", flags.ps_piece);
  if (plan.ps_piece_bytes == 0) throw UsageError("--ps-piece must be larger than 0 bytes");
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
  try {
    plan.calibration = arcoll::calibration_from_env();
  } catch (const arcoll::Error& e) {
    throw UsageError(e.what());
  }
  // Several transports: the first is arcoll's, each other one runs beside it as arcoll:<name>,
  // a communicator of its own over the same ranks.
  std::vector<std::string> other_transports;
  if (!flags.transport.empty()) {
    const auto transports = split_list(flags.transport);
    for (const std::string& transport : transports)
      if (std::string why = arcoll::Communicator::transport_choice_problem(transport); !why.empty())
        throw UsageError("--transport: " + why);
    if (transports.empty()) throw UsageError("--transport: no transport named");
    plan.options.transport = transports.front();
    other_transports.assign(transports.begin() + 1, transports.end());
  }
  if (!flags.chunk.empty()) {
    plan.options.chunk_bytes = parse_size("--chunk", flags.chunk);
    if (plan.options.chunk_bytes == 0) throw UsageError("--chunk: the chunk must not be empty");
  }
  if (!flags.sockets.empty())
    plan.options.sockets_per_peer =
        static_cast<int>(parse_integer("--sockets", flags.sockets, 1, 64));
  if (!flags.timeout.empty()) {
    const auto timeout = arcoll::parse_timeout(flags.timeout);
    if (!timeout)
      throw UsageError("--timeout: " + quoted(flags.timeout) +
                       " is not a positive number of seconds of at most 604800 (a week)");
    plan.options.timeout = *timeout;
  }
  plan.json_path = flags.json;
  plan.csv_path = flags.csv;

  plan.backend_options.gloo_algorithm = flags.gloo_algo;
  if (std::find(std::begin(kGlooAlgorithms), std::end(kGlooAlgorithms), flags.gloo_algo) ==
      std::end(kGlooAlgorithms))
    throw UsageError("--gloo-algo: unknown algorithm " + quoted(flags.gloo_algo) +
                     " (known: ring, ring_chunked, halving_doubling, bcube)");
  plan.mpirun_args = mpirun_args_or_default(flags.mpirun_args, flags.transport);
  std::string compare = flags.compare;
  // The first run (no arguments) answers how arcoll does here: beside the CPU peers this
  // arbench was built with and the memory ceiling.
  if (argc == 1) {
    for (const char* peer : {"mpi", "gloo"})
      if (BackendRegistry::instance().find(peer) != nullptr)
        compare += std::string(compare.empty() ? "" : ",") + peer;
  }
  if (flags.memcpy || argc == 1) compare += compare.empty() ? "memcpy,ceiling" : ",memcpy,ceiling";
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
  if (!other_transports.empty()) {
    if (plan.backends.front() != "arcoll" || !plan.algorithms.empty())
      throw UsageError(
          "--transport with several names compares arcoll over each: it takes no "
          "--backend or --algo list beside it");
    plan.compare = true;
    for (std::size_t i = 0; i < other_transports.size(); ++i)
      plan.backends.insert(plan.backends.begin() + 1 + static_cast<std::ptrdiff_t>(i),
                           kArcollOver + other_transports[i]);
  }
  for (const std::string& name : plan.backends) {
    if (name.starts_with(kArcollOver)) continue;
    try {
      check_backend_built(name);
    } catch (const BackendUsageError& e) {
      throw UsageError((plan.compare ? "--compare: " : "--backend: ") + std::string(e.what()));
    }
  }
  return plan;
}

}  // namespace arbench
