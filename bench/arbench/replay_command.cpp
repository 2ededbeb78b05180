#include "arbench/replay_command.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "arbench/comms_trace_command.hpp"
#include "arbench/files.hpp"
#include "arbench/text.hpp"
#include "arcoll/cluster.hpp"
#include "arcoll/error.hpp"
#include "arcoll/tuning.hpp"
#include "arcoll/types.hpp"
#include "replay/model.hpp"
#include "replay/predict.hpp"
#include "replay/replay.hpp"

namespace arbench {
namespace {

namespace rp = arcoll::replay;
using Json = nlohmann::ordered_json;

// What a sweep varies: the framework's policy (with its bucket size), the all-reduce
// algorithm and the wire format.
struct Variant {
  rp::Policy policy;
  std::string algorithm;
  std::string wire;
  std::string label() const {
    std::string text = policy.name();
    if (policy.kind == rp::PolicyKind::buckets)
      text += " of " + format_bytes(static_cast<double>(policy.bucket_bytes));
    return text + ", " + algorithm + ", " + wire;
  }
};

// One configuration measured over real ranks (or not, when simulated) and predicted.
struct Measured {
  double mean = 0, p50 = 0, p99 = 0, compute = 0, communication = 0, exposed = 0;
  std::vector<double> iterations;  // each iteration's time: the slowest rank's
};
struct Outcome {
  Variant variant;
  std::vector<std::size_t> bucket_bytes;  // each all-reduce of an iteration
  std::optional<Measured> measured;
  rp::Prediction predicted;
  double iteration() const { return measured ? measured->mean : predicted.iteration; }
};

// The replay's fixed settings and its variants, from the flags.
struct ReplaySetup {
  rp::ReplayConfig config;
  std::vector<Variant> variants;
  std::size_t baseline = 0;  // the variant the others compare with: PyTorch DDP's defaults
};

// The all-reduce bytes the cost model sees: the wire format halves what f32 moves.
std::size_t wire_bytes(std::size_t bytes, const std::string& wire) {
  return wire == "f32" ? bytes : bytes / 2;
}

// A flag's values: its text split at commas (a list only under --sweep), `sweep_default` when
// not given under --sweep, `single_default` when not given otherwise; "all" is `all`.
std::vector<std::string> values_of(const char* flag, const std::string& text, bool sweep,
                                   const std::string& single_default,
                                   const std::string& sweep_default,
                                   const std::vector<std::string>& all) {
  const std::string given = !text.empty() ? text : sweep ? sweep_default : single_default;
  if (given == "all") return all;
  std::vector<std::string> values = split_list(given);
  if (values.size() > 1 && !sweep)
    throw UsageError(std::string(flag) + ": a list (" + quoted(given) + ") needs --sweep");
  for (const std::string& v : values)
    if (v.empty()) throw UsageError(std::string(flag) + ": an empty name in " + quoted(given));
  return values;
}

ReplaySetup replay_setup(const ReplayFlags& flags) {
  ReplaySetup setup;
  rp::ReplayConfig& config = setup.config;
  config.model = rp::model_named(flags.model);
  config.device = rp::device_profile(flags.profile);
  config.batch = static_cast<int>(parse_integer("--batch", flags.batch, 1, 1 << 20));
  config.iterations = static_cast<int>(parse_integer("--iters", flags.iterations, 1, 1 << 20));
  config.warmup = static_cast<int>(parse_integer("--warmup", flags.warmup, 0, 1 << 20));

  const std::vector<std::string> runnable = rp::policy_names();
  std::vector<std::string> algorithms = arcoll::Communicator::allreduce_algorithms();
  algorithms.insert(algorithms.begin(), "auto");
  const auto policies = values_of("--policy", flags.policy, flags.sweep, "buckets",
                                  "sync-after-backward,wfbp,buckets,fusion", runnable);
  const auto algos = values_of("--algo", flags.algorithm, flags.sweep, "auto",
                               "auto,ring,hierarchical", algorithms);
  const auto wires =
      values_of("--wire", flags.wire, flags.sweep, "f32", "f32,f16", {"f32", "f16", "bf16"});
  const auto buckets =
      values_of("--bucket-bytes", flags.bucket_bytes, flags.sweep, "25M", "4M,16M,25M,64M", {});
  for (const std::string& a : algos)
    if (std::find(algorithms.begin(), algorithms.end(), a) == algorithms.end())
      throw UsageError("--algo: unknown algorithm " + quoted(a));
  for (const std::string& w : wires)
    if (w != "f32" && w != "f16" && w != "bf16")
      throw UsageError("--wire: " + quoted(w) + " is not f32, f16 or bf16");
  std::vector<std::size_t> bucket_sizes;
  for (const std::string& b : buckets) {
    bucket_sizes.push_back(parse_size("--bucket-bytes", b));
    if (bucket_sizes.back() == 0) throw UsageError("--bucket-bytes: a bucket must not be empty");
  }

  for (const std::string& name : policies) {
    rp::Policy policy = rp::parse_policy(name);
    // Only buckets has a bucket size to vary.
    const std::vector<std::size_t> sizes = policy.kind == rp::PolicyKind::buckets
                                               ? bucket_sizes
                                               : std::vector<std::size_t>{policy.bucket_bytes};
    // A parameter server carries f32 and has no all-reduce algorithm: once per policy.
    const bool parameter_server = policy.kind == rp::PolicyKind::ps;
    for (std::size_t size : sizes)
      for (const std::string& algorithm : algos)
        for (const std::string& wire : wires) {
          if (parameter_server && (algorithm != algos.front() || wire != wires.front())) continue;
          policy.bucket_bytes = size;
          setup.variants.push_back({policy, algorithm, parameter_server ? "f32" : wire});
        }
  }
  // A sweep says how much better than the defaults (DDP: 25 MiB buckets; auto; f32) it gets.
  const rp::Policy ddp;
  auto is_default = [&](const Variant& v) {
    return v.policy.kind == rp::PolicyKind::buckets && v.policy.bucket_bytes == ddp.bucket_bytes &&
           v.algorithm == "auto" && v.wire == "f32";
  };
  auto found = std::find_if(setup.variants.begin(), setup.variants.end(), is_default);
  if (flags.sweep && found == setup.variants.end()) {
    setup.variants.push_back({ddp, "auto", "f32"});
    found = setup.variants.end() - 1;
  }
  setup.baseline =
      found == setup.variants.end() ? 0 : static_cast<std::size_t>(found - setup.variants.begin());
  return setup;
}

std::vector<double> backward_times(const rp::ReplayConfig& config) {
  std::vector<double> backward;
  for (auto it = config.model.layers.rbegin(); it != config.model.layers.rend(); ++it)
    backward.push_back(rp::backward_seconds(config, *it));
  return backward;
}

// The measured figures of one configuration from every rank's iterations.
Measured measure(const rp::ReplayResult& result,
                 const std::vector<std::vector<rp::IterationRecord>>& ranks) {
  Measured m;
  const std::size_t n = result.iterations.size();
  m.iterations.assign(n, 0.0);
  for (const auto& rank : ranks)  // the slowest rank sets each iteration's time
    for (std::size_t i = 0; i < n; ++i) m.iterations[i] = std::max(m.iterations[i], rank[i].total);
  for (std::size_t i = 0; i < n; ++i) {
    m.mean += m.iterations[i] / static_cast<double>(n);
    m.compute += result.iterations[i].compute / static_cast<double>(n);
    m.communication += result.iterations[i].communication / static_cast<double>(n);
  }
  m.exposed = std::max(0.0, m.mean - m.compute);
  std::vector<double> sorted = m.iterations;
  std::sort(sorted.begin(), sorted.end());
  auto quantile = [&](double q) {
    return sorted[std::min(n - 1, static_cast<std::size_t>(q * static_cast<double>(n)))];
  };
  m.p50 = quantile(0.5);
  m.p99 = quantile(0.99);
  return m;
}

double overlap_of(double communication, double exposed) {
  return communication > 0 ? std::clamp(1.0 - exposed / communication, 0.0, 1.0) : 1.0;
}

const char* const kColumns = "# %10s %10s %10s %10s %10s %10s %8s %10s %8s\n";

std::string figures_line(double iteration, std::optional<double> p50, std::optional<double> p99,
                         double compute, double communication, double exposed, int ranks,
                         int batch) {
  auto optional_ms = [](std::optional<double> v) {
    return v ? printf_string("%10.2f", *v * 1e3) : printf_string("%10s", "-");
  };
  return printf_string("  %10.2f %s %s %10.2f %10.2f %10.2f %7.0f%% %10.1f %7.0f%%\n",
                       iteration * 1e3, optional_ms(p50).c_str(), optional_ms(p99).c_str(),
                       compute * 1e3, communication * 1e3, exposed * 1e3,
                       100 * overlap_of(communication, exposed), batch * ranks / iteration,
                       100 * compute / iteration);
}

// Where the run happened, for the header and the JSON.
struct Where {
  int ranks = 0;
  std::string description;  // "4 ranks on 2 host(s), shm+tcp" or the cluster's name
  std::string link_costs;   // where the cost model's figures came from
  bool simulated = false;
};

std::string header(const ReplaySetup& setup, const Where& where) {
  const rp::ReplayConfig& c = setup.config;
  const auto& m = c.model;
  std::string text = printf_string(
      "# arbench replay%s: %s, %zu tensors, %lld parameters (%.1f MiB of f32 gradients); batch "
      "%d per rank\n",
      where.simulated ? " --simulate" : "", m.name.c_str(), m.tensor_count(),
      static_cast<long long>(m.parameter_count()),
      static_cast<double>(m.parameter_count()) * 4 / (1 << 20), c.batch);
  // A model file with measured times (arbench train --profile-layers) needs no device.
  text += m.measured_batch > 0
              ? printf_string(
                    "# compute: the model file's measured layer times (at batch %d), "
                    "scaled to this batch",
                    m.measured_batch)
              : "# compute: " + c.device.summary +
                    printf_string(", %.0f%% of peak", c.device.efficiency * 100);
  text += where.simulated ? "\n" : "; emulated by sleeping for each layer's time\n";
  text += "# " + where.description + "; prediction from " + where.link_costs + "\n";
  if (!where.simulated)
    text += printf_string("# %d iterations after %d of warm-up\n", c.iterations, c.warmup);
  return text;
}

std::string single_text(const ReplaySetup& setup, const Where& where, const Outcome& o) {
  const int batch = setup.config.batch;
  const rp::Prediction& p = o.predicted;
  std::string text = printf_string(
      "# policy %s: %zu %s per iteration\n", o.variant.label().c_str(), o.bucket_bytes.size(),
      o.variant.policy.kind == rp::PolicyKind::ps ? "push_pull(s)" : "all-reduce(s)");
  text += printf_string(kColumns, "iter (ms)", "p50", "p99", "compute", "comm", "exposed",
                        "overlap", "samples/s", "scaling");
  if (o.measured) {
    const Measured& m = *o.measured;
    text += figures_line(m.mean, m.p50, m.p99, m.compute, m.communication, m.exposed, where.ranks,
                         batch);
  }
  text += figures_line(p.iteration, std::nullopt, std::nullopt, p.compute, p.communication,
                       p.exposed, where.ranks, batch);
  if (o.measured)
    text += printf_string(
        "# the second line is the model's prediction: %+.1f%% from the measured mean\n",
        100 * (p.iteration - o.measured->mean) / o.measured->mean);
  else
    text += "# predicted by the model; nothing was run\n";
  return text;
}

// The sweep's ranked table and its answer.
std::string sweep_text(const ReplaySetup& setup, const Where& where,
                       const std::vector<Outcome>& outcomes) {
  std::vector<std::size_t> order(outcomes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return outcomes[a].iteration() < outcomes[b].iteration();
  });
  const double baseline = outcomes[setup.baseline].iteration();
  std::string text = printf_string(
      "# %zu configurations, ranked by %s iteration time; speed-up against the default (%s)\n",
      outcomes.size(), where.simulated ? "predicted" : "measured mean",
      outcomes[setup.baseline].variant.label().c_str());
  text += printf_string("# %4s  %-40s %10s %10s %10s %8s %10s %8s\n", "rank", "configuration",
                        "iter (ms)", "predicted", "exposed", "overlap", "samples/s", "speed-up");
  for (std::size_t r = 0; r < order.size(); ++r) {
    const Outcome& o = outcomes[order[r]];
    const double iteration = o.iteration();
    const double exposed = o.measured ? o.measured->exposed : o.predicted.exposed;
    const double communication = o.measured ? o.measured->communication : o.predicted.communication;
    text += printf_string("  %4zu  %-40s %10.2f %10.2f %10.2f %7.0f%% %10.1f %7.2fx\n", r + 1,
                          o.variant.label().c_str(), iteration * 1e3, o.predicted.iteration * 1e3,
                          exposed * 1e3, 100 * overlap_of(communication, exposed),
                          setup.config.batch * where.ranks / iteration, baseline / iteration);
  }
  const Outcome& best = outcomes[order.front()];
  text += printf_string("# best for %s here: %s, %.2fx the default's speed\n",
                        setup.config.model.name.c_str(), best.variant.label().c_str(),
                        baseline / best.iteration());
  return text;
}

Json figures_json(double iteration, double compute, double communication, double exposed, int ranks,
                  int batch) {
  return {{"iteration_ms", iteration * 1e3},
          {"compute_ms", compute * 1e3},
          {"communication_ms", communication * 1e3},
          {"exposed_ms", exposed * 1e3},
          {"overlap", overlap_of(communication, exposed)},
          {"samples_per_s", batch * ranks / iteration},
          {"scaling_efficiency", compute / iteration}};
}

std::string replay_json(const ReplaySetup& setup, const Where& where,
                        const std::vector<Outcome>& outcomes) {
  const rp::ReplayConfig& c = setup.config;
  Json results = Json::array();
  for (const Outcome& o : outcomes) {
    Json r = {{"configuration", o.variant.label()},
              {"policy", o.variant.policy.name()},
              {"bucket_bytes", o.variant.policy.kind == rp::PolicyKind::buckets
                                   ? Json(o.variant.policy.bucket_bytes)
                                   : Json(nullptr)},
              {"algorithm", o.variant.algorithm},
              {"wire", o.variant.wire},
              {"allreduce_bytes", o.bucket_bytes}};
    const rp::Prediction& p = o.predicted;
    r["predicted"] =
        figures_json(p.iteration, p.compute, p.communication, p.exposed, where.ranks, c.batch);
    if (o.measured) {
      const Measured& m = *o.measured;
      Json measured =
          figures_json(m.mean, m.compute, m.communication, m.exposed, where.ranks, c.batch);
      measured["p50_ms"] = m.p50 * 1e3;
      measured["p99_ms"] = m.p99 * 1e3;
      Json each = Json::array();
      for (double t : m.iterations) each.push_back(t * 1e3);
      measured["iterations_ms"] = each;
      r["measured"] = measured;
      r["prediction_error"] = (p.iteration - m.mean) / m.mean;
    }
    results.push_back(r);
  }
  Json j = {{"schema", "arbench.replay/1"},
            {"model",
             {{"name", c.model.name},
              {"tensors", c.model.tensor_count()},
              {"parameters", c.model.parameter_count()}}},
            {"batch_per_rank", c.batch},
            {"device", {{"name", c.device.name}, {"summary", c.device.summary}}},
            {"ranks", where.ranks},
            {"where", where.description},
            {"simulated", where.simulated},
            {"link_costs", where.link_costs},
            {"iterations", where.simulated ? Json(nullptr) : Json(c.iterations)},
            {"warmup", where.simulated ? Json(nullptr) : Json(c.warmup)},
            {"baseline", setup.baseline},
            {"results", results}};
  return j.dump(2) + "\n";
}

// Prints (and writes) what rank 0 gathered; the exit code.
int report(const ReplayFlags& flags, const ReplaySetup& setup, const Where& where,
           const std::vector<Outcome>& outcomes) {
  print(header(setup, where) + (flags.sweep ? sweep_text(setup, where, outcomes)
                                            : single_text(setup, where, outcomes.front())));
  if (!flags.json.empty()) {
    write_atomically(flags.json, replay_json(setup, where, outcomes));
    print("# results written to " + flags.json + "\n");
  }
  return 0;
}

// `--simulate --topology FILE`: the model's predictions for a described cluster.
int simulate(const ReplayFlags& flags, const ReplaySetup& setup) {
  arcoll::ClusterSpec cluster;
  try {
    cluster = arcoll::load_cluster(
        flags.topology, static_cast<int>(parse_integer("--hosts", flags.hosts, 1, 1 << 20)));
  } catch (const arcoll::Error& e) {
    std::fprintf(stderr, "arbench replay: --topology: %s\n", e.message().c_str());
    return kUsageError;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench replay: %s\n", e.what());
    return kUsageError;
  }
  const auto algorithms = arcoll::Communicator::allreduce_algorithms();
  const std::vector<double> backward = backward_times(setup.config);
  std::vector<Outcome> outcomes;
  for (const Variant& v : setup.variants) {
    rp::ReplayConfig config = setup.config;
    config.policy = v.policy;
    config.algorithm = v.algorithm;
    const auto plan = rp::plan_buckets(config.model, config.policy, backward);
    const auto known = std::find(algorithms.begin(), algorithms.end(), v.algorithm);
    Outcome o{v, {}, std::nullopt, {}};
    for (const rp::Bucket& b : plan) o.bucket_bytes.push_back(b.elements * sizeof(float));
    const bool parameter_server = v.policy.kind == rp::PolicyKind::ps;
    o.predicted = rp::predict_iteration(config, plan, [&](std::size_t bytes) {
      const auto cluster_plan = arcoll::plan_allreduce(cluster, wire_bytes(bytes, v.wire), {0});
      if (parameter_server) return cluster_plan.parameter_servers.front().seconds;
      return known == algorithms.end()
                 ? cluster_plan.chosen.seconds
                 : cluster_plan.algorithms[static_cast<std::size_t>(known - algorithms.begin())]
                       .seconds;
    });
    outcomes.push_back(std::move(o));
  }
  Where where;
  where.ranks = cluster.hosts * cluster.ranks_per_host;
  where.description = "cluster " + cluster.name + " (" + std::to_string(where.ranks) + " ranks)";
  where.link_costs = "the cluster file's link costs";
  where.simulated = true;
  return report(flags, setup, where, outcomes);
}

// One rank of a replay over real ranks: every variant in turn.
int replay_on_ranks(arcoll::Communicator& comm, const ReplayFlags& flags,
                    const ReplaySetup& setup) {
  // The prediction is only as good as the link costs: without a tuning file, this host's for
  // this layout, measured on its first run (as `arbench tune` does) and kept.
  Where where;
  where.ranks = comm.size();
  where.description = std::to_string(comm.size()) + " ranks on " +
                      std::to_string(comm.node_count()) + " host(s), " + comm.transport_name();
  where.link_costs = "link costs from " + comm.options().tuning_file;
  if (comm.options().tuning_file.empty()) {
    const arcoll::CalibratedTuning calibrated =
        arcoll::calibrated_tuning(comm, arcoll::calibration_from_env());
    if (!calibrated.tuning.transports.empty()) comm.set_tuning(calibrated.tuning);
    where.link_costs = calibrated.source;
  }
  std::vector<Outcome> outcomes;
  std::vector<std::vector<rp::IterationRecord>> traced;
  for (const Variant& v : setup.variants) {
    rp::ReplayConfig config = setup.config;
    config.policy = v.policy;
    config.algorithm = v.algorithm;
    comm.set_wire(*arcoll::parse_data_type(v.wire));
    const rp::ReplayResult result = rp::run_replay(comm, config);
    auto ranks = rp::gather_iterations(comm, result);
    Outcome o{v, {}, measure(result, ranks), {}};
    for (const rp::Bucket& b : result.plan) o.bucket_bytes.push_back(b.elements * sizeof(float));
    o.predicted = rp::predict_iteration(config, result.plan, [&](std::size_t bytes) {
      return v.policy.kind == rp::PolicyKind::ps
                 ? comm.predict_parameter_server(bytes, 0).seconds
                 : comm.predict_allreduce(wire_bytes(bytes, v.wire), v.algorithm).seconds;
    });
    outcomes.push_back(std::move(o));
    traced = std::move(ranks);
  }
  if (comm.rank() != 0) return 0;
  const int status = report(flags, setup, where, outcomes);
  if (!flags.trace.empty()) {
    write_atomically(flags.trace,
                     rp::chrome_trace(traced, "arbench replay " + setup.config.model.name + " " +
                                                  outcomes.back().variant.label()));
    print("# timeline written to " + flags.trace +
          " (Chrome trace: open in Perfetto or chrome://tracing)\n");
  }
  return status;
}

}  // namespace

void add_replay_flags(CLI::App* replay, ReplayFlags& flags) {
  replay->add_option("--model", flags.model, "Built-in model or model file")->capture_default_str();
  replay->add_option("--batch", flags.batch, "Samples per rank")->capture_default_str();
  replay->add_option("--profile", flags.profile, "Device profile (p40 ... h100, cpu)")
      ->capture_default_str();
  replay->add_option(
      "--policy", flags.policy,
      "sync-after-backward, wfbp, buckets (default), fusion, ps (MXNet's kvstore on a "
      "parameter server with a share in every rank); under --sweep a list or all "
      "(default: all but ps)");
  replay->add_option("--algo", flags.algorithm,
                     "All-reduce algorithm (default auto); under --sweep a list or all "
                     "(default: auto,ring,hierarchical)");
  replay->add_option("--wire", flags.wire,
                     "f32 (default), f16 or bf16 on the wire; under --sweep a list or all "
                     "(default: f32,f16)");
  replay->add_option("--bucket-bytes", flags.bucket_bytes,
                     "Bucket size of the buckets policy (default 25M); under --sweep a list "
                     "(default: 4M,16M,25M,64M)");
  replay->add_option("--iters", flags.iterations, "Measured iterations")->capture_default_str();
  replay->add_option("--warmup", flags.warmup, "Iterations before measuring")
      ->capture_default_str();
  replay->add_flag("--sweep", flags.sweep,
                   "Run every combination of the policies, bucket sizes, algorithms and wire "
                   "formats given and rank them");
  replay->add_option("--json", flags.json, "Write every figure as JSON")->type_name("FILE");
  replay->add_option("--trace", flags.trace, "Write a timeline (Chrome trace JSON)")
      ->type_name("FILE");
  replay->add_flag("--simulate", flags.simulate,
                   "Predict with the model for --topology instead of running ranks");
  replay->add_option("--topology", flags.topology, "Cluster file for --simulate")
      ->type_name("FILE");
  replay->add_option("--hosts", flags.hosts, "Hosts, for a saved single host")->type_name("N");
  replay
      ->add_option("--comms-trace", flags.comms_trace,
                   "Replay a recorded communication trace (PARAM's basic JSON format): a "
                   "file for every rank, or a directory of rank<N>.json files")
      ->type_name("PATH");
  replay->add_flag("--back-to-back", flags.back_to_back,
                   "With --comms-trace: issue each collective at once instead of at its "
                   "recorded time");
}

int run_replay_command(const ToolFlags& tool, const ReplayFlags& flags) {
  if (!flags.comms_trace.empty()) return run_comms_trace_command(tool, flags);
  ReplaySetup setup;
  try {
    if (flags.simulate && flags.topology.empty())
      throw UsageError("--simulate needs --topology FILE");
    setup = replay_setup(flags);
    if (flags.sweep && !flags.trace.empty())
      throw UsageError("--trace: a timeline is of one configuration, not of a --sweep");
    for (const auto& [flag, path] : {std::pair{"--json", flags.json}, {"--trace", flags.trace}})
      if (!path.empty())
        if (auto error = check_writable(flag, path)) throw UsageError(*error);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench replay: %s\n", e.what());
    return kUsageError;
  }
  if (flags.simulate) return simulate(flags, setup);
  return run_tool(
      "replay", tool, 1, 4, [] { return std::optional<std::string>(); },
      [&](arcoll::Communicator& comm) { return replay_on_ranks(comm, flags, setup); });
}

}  // namespace arbench
