#include "plan.hpp"

#include <torch/cuda.h>

#include <cmath>
#include <cstdlib>

#include "arbench/cli.hpp"
#include "arbench/files.hpp"
#include "arbench/text.hpp"
#include "exchange.hpp"
#include "fashion_mnist.hpp"
#include "nets.hpp"

namespace arbench::train {
namespace {

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

}  // namespace

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
  if (flags.device != "cpu" && flags.device != "cuda")
    throw UsageError("--device " + quoted(flags.device) + ": expected cpu or cuda");
  if (flags.device == "cuda" && !torch::cuda::is_available())
    throw UsageError(
        "--device cuda: this libtorch sees no CUDA device (torch::cuda::is_available() is false: "
        "a build without CUDA, no GPU, or no driver)");
  base.device = flags.device;
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
    plan.kill_rank =
        static_cast<int>(parse_integer("--kill's rank", flags.kill.substr(0, at), 0, workers - 1));
    if (workers < 2) throw UsageError("--kill: a run of one rank has no survivor");
    const std::int64_t step =
        parse_integer("--kill's step", flags.kill.substr(at + 1), 0, 1ll << 40);
    for (TrainConfig& c : plan.configs) {
      c.kill_rank = plan.kill_rank;
      c.kill_step = step;
    }
  }
  if (flags.elastic) {
    if (plan.backends != std::vector<std::string>{"arcoll"})
      throw UsageError(
          "--elastic: only arcoll's exchange shrinks to its survivors "
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
  add("--device", f.device, "cpu|cuda",
      "Where the model trains; cuda: rank r on GPU r modulo their count, its gradients copied "
      "to host buckets for the exchange")
      ->capture_default_str();
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

}  // namespace arbench::train
