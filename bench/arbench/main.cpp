// arbench: collective benchmark with nccl-tests' columns (all_reduce_perf and the others).
//
// Without a launcher it forks --np ranks on this host; under mpirun, srun, torchrun or with
// ARCOLL_RANK set it runs as the rank the environment describes. The plain sweep is the
// default command (sweep_command.hpp); the tools beside it are subcommands, each in a file of
// its own; this file is their command line.
#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "arbench/cli.hpp"
#include "arbench/compare.hpp"
#include "arbench/html_report.hpp"
#include "arbench/links_command.hpp"
#include "arbench/models.hpp"
#include "arbench/plan_command.hpp"
#include "arbench/plot.hpp"
#include "arbench/replay_command.hpp"
#include "arbench/sweep_command.hpp"
#include "arbench/topo_command.hpp"
#include "arbench/tune_command.hpp"
#include "arcoll/types.hpp"

namespace {

// The sweep's flags; -f and -i are told apart from their defaults through `step_options`.
void add_sweep_flags(CLI::App& app, arbench::SweepFlags& flags, CLI::Option* step_options[2]) {
  // Every value is taken as text and validated by make_plan, for messages that name the flag.
  auto add = [&](const char* names, std::string& value, const char* type, const char* help) {
    return app.add_option(names, value, help)->type_name(type);
  };
  add("-b,--minbytes", flags.min_bytes, "SIZE", "Smallest size in bytes (K/M/G/T suffixes)")
      ->capture_default_str();
  add("-e,--maxbytes", flags.max_bytes, "SIZE", "Largest size in bytes (K/M/G/T suffixes)")
      ->capture_default_str();
  step_options[0] = add("-f,--stepfactor", flags.step_factor, "N",
                        "Multiply the size by N each step (1: add -i instead)")
                        ->capture_default_str();
  step_options[1] = add("-i,--stepbytes", flags.step_bytes, "SIZE",
                        "Add SIZE bytes each step instead (default 1M with -f 1)");
  add("--np", flags.np, "N",
      "Ranks to fork on this host (default: online cores, 2 to 8); under a launcher it must match "
      "the world size");
  add("-w,--warmup_iters", flags.warmup_iters, "N", "Untimed iterations before each timing")
      ->capture_default_str();
  add("-n,--iters", flags.iters, "N",
      "Timed iterations; auto: as many as fill 50 ms per size and group (at least 5 in all, one "
      "per --repeat pass), fewer warm-ups where one call lasts that long; the default of arbench "
      "without arguments")
      ->capture_default_str();
  add("--repeat", flags.repeat, "R",
      "Time each size R times (-n iterations each) in R passes through the sizes, in turn "
      "with the other backends of the run (--compare, --algo all), so that a slow phase of the "
      "host weighs on all of them and on one pass: the median is reported, ratios whose passes "
      "disagree are marked noisy, and every pass, min, max, p99 and the coefficient of "
      "variation go to the JSON and a cv(%) column, for arbench compare; 5 passes of 10 ms "
      "without arguments")
      ->capture_default_str();
  add("--min-busbw", flags.min_busbw, "GB/s",
      "Fail (exit 1, a FAILED line) when the average bus bandwidth is below this: a health gate");
  add("--coll", flags.coll, "NAME",
      "Collective: allreduce, allgather, reduce_scatter, broadcast, reduce, alltoall, gather, "
      "scatter or sendrecv (nccl-tests' names too: all_reduce, all_gather), a comma-separated "
      "list, or all; sizes, busbw and checks as nccl-tests' binary of that name")
      ->capture_default_str();
  add("-d,--datatype", flags.datatype, "TYPE",
      "f32 f64 f16 bf16 i8 u8 i32 i64 (or nccl-tests' names), a comma-separated list, or all")
      ->capture_default_str();
  add("-o,--op", flags.op, "OP", "sum prod min max avg, a comma-separated list, or all")
      ->capture_default_str();
  add("--algo", flags.algo, "NAME",
      "Algorithm (default: ARCOLL_ALGO or auto; a collective it does not run goes by auto's); "
      "ps, a parameter server's push_pull; a comma-separated list, or all (every algorithm of "
      "the one --coll, with ps for allreduce, and auto): each at every size, with the cost "
      "model's prediction beside the measured time");
  add("--channels", flags.channels, "N",
      "Rings of the multi_ring algorithm (default: ARCOLL_CHANNELS or 2)");
  add("--wire", flags.wire, "TYPE",
      "Mixed precision: carry f32 as f16 or bf16, accumulate in f32 (default: ARCOLL_WIRE or "
      "f32); f32 rows then report their error");
  add("--tuning", flags.tuning, "FILE",
      "Link costs for --algo auto's cost model, as written by `arbench tune` (default: "
      "ARCOLL_TUNING_FILE or built-in)");
  add("--transport", flags.transport, "LIST",
      "Transport, or several side by side in one table (shm,ucx: the first is arcoll's, each "
      "other one a backend arcoll:<name>; WITHIN+ACROSS, e.g. shm+ucx, names the transport "
      "within hosts and the one across them; default: ARCOLL_TRANSPORT or auto)");
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
               "Also time a single-core memcpy of each size (rank 0 alone) and the all-reduce's "
               "memory ceiling (every rank at once reduces its share with arcoll's kernels and "
               "copies the rest, no peers), in the same run (adds memcpy and ceiling to "
               "--compare)");
  app.add_flag("--shared-buffers", flags.shared_buffers,
               "Allocate the send and receive buffers with arcoll::mem_alloc: memory the ranks "
               "of a host read from each other in place, as registered buffers are in nccl-tests "
               "(-R); the peers (--compare) keep heap buffers");
  add("--device", flags.device, "NAME",
      "Where arcoll's buffers live: host, or cuda (GPU memory, each rank on the GPU of its "
      "local rank, staged there as nccl's are; the call itself stages through host memory)")
      ->capture_default_str();
  add("--gloo-algo", flags.gloo_algo, "NAME",
      "Gloo allreduce: ring, ring_chunked, halving_doubling or bcube")
      ->capture_default_str();
  add("--ps-servers", flags.ps_servers, "K",
      "--algo ps with K dedicated server ranks (the job's last, beside --np workers); 0: a "
      "server share in every worker")
      ->capture_default_str();
  add("--ps-piece", flags.ps_piece, "SIZE",
      "--algo ps: the pieces tensors are cut into and spread over the servers (BytePS: 4M)")
      ->capture_default_str();
  add("--mpirun-args", flags.mpirun_args, "ARGS",
      "Extra mpirun flags when arbench starts mpirun itself (blank-separated; default: --mca "
      "pml ob1 --mca btl self,vader,tcp, and btl self,tcp with --transport tcp)");
}

// A tool beside the sweep: `arbench NAME ...`.
struct Subcommand {
  CLI::App* app;
  std::function<int()> run;
};

// `arbench train ...` is the program arbench-train beside this one (it links libtorch): run it
// with the same arguments. Returns only when it cannot be run.
int run_train(int argc, char** argv) {
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string dir =
      n > 0 ? std::filesystem::path(std::string(self, static_cast<std::size_t>(n)))
                  .parent_path()
                  .string()
            : ".";
  const std::string program = dir + "/arbench-train";
  if (::access(program.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "arbench: this build has no arbench train (it needs libtorch-dev and zlib1g-dev "
                 "at configure time; %s is missing)\n",
                 program.c_str());
    return arbench::kUsageError;
  }
  std::vector<char*> args = {const_cast<char*>(program.c_str())};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  std::fflush(stdout);
  ::execv(program.c_str(), args.data());
  std::fprintf(stderr, "arbench: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "train") return run_train(argc, argv);
  CLI::App app{"arbench: collective benchmark with nccl-tests' columns"};
  app.set_version_flag("--version", "arbench " + std::string(arcoll::version()) + " (git " +
                                        std::string(arcoll::git_commit()) + ")");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last one wins
  arbench::SweepFlags flags;
  CLI::Option* step_options[2] = {};
  add_sweep_flags(app, flags, step_options);
  // Subcommands (tune, topo, links, plan, ...) register here; without one the sweep runs.
  std::vector<Subcommand> subcommands;
  arbench::TuneFlags tune_flags;
  CLI::App* tune = app.add_subcommand(
      "tune",
      "Measure latency, bandwidth and reduction rate of each transport between the ranks "
      "at hand and write a tuning file for the cost model behind --algo auto");
  add_tool_flags(tune, tune_flags.tool);
  tune->add_option("-o,--output", tune_flags.output, "Tuning file to write")
      ->type_name("FILE")
      ->capture_default_str();
  subcommands.push_back({tune, [&] { return arbench::run_tune_command(tune_flags); }});
  arbench::LinksFlags links;
  CLI::App* links_app = app.add_subcommand(
      "links",
      "Latency and bandwidth between every ordered pair of ranks (each rank in one pair "
      "at a time); flags slow pairs and hosts: each host against the pairs between the others, "
      "each pair against --baseline, or against --expect RATE");
  add_tool_flags(links_app, links.tool);
  links_app->add_option("--bytes", links.bytes, "Message size for bandwidth (K/M suffixes)")
      ->type_name("SIZE")
      ->capture_default_str();
  links_app
      ->add_option("--threshold", links.threshold,
                   "Flag pairs below this fraction of their reference")
      ->type_name("FRACTION")
      ->capture_default_str();
  links_app->add_option("--json", links.json, "Write the matrix as JSON")->type_name("FILE");
  links_app
      ->add_option("--baseline", links.baseline,
                   "Judge each pair against the same pair in an earlier run's --json (two hosts "
                   "have no other pair to compare with)")
      ->type_name("FILE");
  links_app
      ->add_option("--expect", links.expect,
                   "Judge every pair between hosts against this rate (e.g. 25gbit, 100mbit)")
      ->type_name("RATE");
  subcommands.push_back({links_app, [&] { return arbench::run_links_command(links); }});
  arbench::PlanFlags plan_flags;
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
  plan->add_option("--ps-servers", plan_flags.ps_servers,
                   "A parameter server's push_pull beside them, for each count of dedicated "
                   "server hosts in the list (0: a server share in every host)")
      ->type_name("LIST")
      ->capture_default_str();
  subcommands.push_back({plan, [&] { return arbench::run_plan_command(plan_flags); }});
  arbench::TopoFlags topo_flags;
  CLI::App* topo = app.add_subcommand(
      "topo",
      "What this host has for communication: cores, NUMA nodes, caches, network "
      "interfaces, RDMA devices, GPUs (and which are missing); with several ranks, where "
      "each runs and the links between them");
  add_tool_flags(topo, topo_flags.tool);
  topo->add_option("--json", topo_flags.json, "Write the same as JSON")->type_name("FILE");
  topo->add_option("--dot", topo_flags.dot,
                   "Write a Graphviz picture of hosts, ranks, NICs and links")
      ->type_name("FILE");
  subcommands.push_back({topo, [&] { return arbench::run_topo_command(topo_flags); }});
  arbench::ToolFlags replay_tool;
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
  // Listed for --help; main() hands `train` to arbench-train before parsing.
  app.add_subcommand("train",
                     "Data-parallel training (libtorch) through arcoll, Gloo, MPI and NCCL side "
                     "by side: time, accuracy, CPU, memory (arbench train --help)")
      ->allow_extras();
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every parse error exits 2, whatever CLI11's own code.
    return app.exit(e) == 0 ? 0 : arbench::kUsageError;
  }
  for (const Subcommand& sub : subcommands) {
    if (!sub.app->parsed()) continue;
    // `arbench --np 4 tune` would run tune on its defaults: the sweep's options go unread.
    for (const CLI::Option* option : app.get_options())
      if (option->count() > 0 && option->get_name() != "--help") {
        std::fprintf(stderr, "arbench %s: %s is the sweep's option; give %s's own after it "
                     "(arbench %s --help)\n", sub.app->get_name().c_str(),
                     option->get_name().c_str(), sub.app->get_name().c_str(),
                     sub.app->get_name().c_str());
        return arbench::kUsageError;
      }
    return sub.run();
  }
  flags.step_factor_given = step_options[0]->count() > 0;
  flags.step_bytes_given = step_options[1]->count() > 0;
  return arbench::run_sweep_command(flags, argc, argv);
}
