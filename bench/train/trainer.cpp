#include "trainer.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <stdexcept>

#include "arbench/text.hpp"
#include "data_parallel.hpp"

namespace arbench::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// LARC's trust coefficient, clipping mode (a layer's rate never exceeds the global one).
constexpr double kLarsTrust = 0.02;

double cpu_seconds(const timeval& t) {
  return double(t.tv_sec) + double(t.tv_usec) * 1e-6;
}

// Peak resident memory since reset_peak_rss(), from /proc (all threads).
void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}
double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  return 0;
}

std::vector<float> flatten(const std::vector<torch::Tensor>& tensors) {
  std::vector<float> flat;
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    flat.insert(flat.end(), c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  }
  return flat;
}

void unflatten(const std::vector<float>& flat, std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  std::size_t at = 0;
  for (torch::Tensor& t : tensors) {
    t.copy_(torch::from_blob(const_cast<float*>(flat.data()) + at, t.sizes(), torch::kFloat32));
    at += static_cast<std::size_t>(t.numel());
  }
}

std::vector<torch::Tensor> float_buffers(const StagedNet& net) {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& b : net->buffers())
    if (b.scalar_type() == torch::kFloat32) out.push_back(b);
  return out;
}

}  // namespace

const char* to_string(LrScaling scaling) {
  switch (scaling) {
    case LrScaling::linear:
      return "linear";
    case LrScaling::sqrt:
      return "sqrt";
    case LrScaling::none:
      break;
  }
  return "none";
}

std::string TrainConfig::label() const {
  std::string text = policy + " " + algorithm + " " + std::string(arcoll::to_string(wire)) +
                     (error_feedback ? "+ef" : "") + " b" + std::to_string(batch) +
                     printf_string(" lr%g", lr) + " " + to_string(lr_scaling);
  if (warmup_epochs > 0) text += printf_string(" warmup%g", warmup_epochs);
  if (lars) text += " lars";
  return text;
}

Trainer::Trainer(arcoll::Communicator& comm, const TrainConfig& config, const TrainingData* data)
    : comm_(&comm),
      first_rank_(comm.rank()),
      config_(config),
      info_(*NetRegistry::instance().find(config.model)),
      data_(data) {
  if (config.device == "cuda") {
    // The GPU of this rank's place on its host, as the NCCL exchange picks it.
    const int local = comm.local_rank() >= 0 ? comm.local_rank() : comm.rank();
    device_ = torch::Device(torch::kCUDA,
                            static_cast<c10::DeviceIndex>(local % torch::cuda::device_count()));
  }
  if (info_.data == DataKind::imagenet) {
    torch::manual_seed(config.seed * 7919 + static_cast<std::uint64_t>(comm.rank()));
    std::vector<std::int64_t> shape = sample_shape(info_.data);
    shape.insert(shape.begin(), config.batch);
    synthetic_.input = torch::randn(shape).to(device_);
    synthetic_.target =
        torch::randint(0, class_count(info_.data), {config.batch}, torch::kInt64).to(device_);
  }
}

StagedNet Trainer::build_net() const {
  torch::manual_seed(config_.seed);
  StagedNet net = info_.build();
  net->to(device_);
  net->train();
  return net;
}

std::int64_t Trainer::steps_per_epoch() const {
  if (info_.data == DataKind::imagenet) return config_.steps_per_epoch;
  const std::int64_t whole =
      data_->train.labels.size(0) / (std::int64_t(comm_->size()) * config_.batch);
  return config_.steps_per_epoch > 0 ? std::min<std::int64_t>(whole, config_.steps_per_epoch)
                                     : whole;
}

torch::Tensor Trainer::epoch_order(int epoch) const {
  if (info_.data == DataKind::imagenet) return {};
  // The same permutation on every rank: the seed and the epoch decide it.
  auto generator = at::detail::createCPUGenerator(config_.seed * 1000003 + std::uint64_t(epoch));
  return torch::randperm(data_->train.labels.size(0), generator, torch::kInt64);
}

Trainer::Batch Trainer::batch(const torch::Tensor& order, std::int64_t step) const {
  if (info_.data == DataKind::imagenet) return synthetic_;
  // This step's global batch, then this rank's disjoint share of it.
  const std::int64_t global = std::int64_t(comm_->size()) * config_.batch;
  const torch::Tensor indices =
      order.slice(0, step * global + comm_->rank(), (step + 1) * global, comm_->size());
  return {data_->train.images.index_select(0, indices).to(device_),
          data_->train.labels.index_select(0, indices).to(device_)};
}

double Trainer::learning_rate(std::int64_t step, std::int64_t total_steps) const {
  const double ratio = double(config_.batch) * comm_->size() / config_.reference_batch;
  const double factor = config_.lr_scaling == LrScaling::linear ? ratio
                        : config_.lr_scaling == LrScaling::sqrt ? std::sqrt(ratio)
                                                                : 1.0;
  const double peak = config_.lr * factor;
  const auto warmup = static_cast<std::int64_t>(config_.warmup_epochs * steps_per_epoch());
  if (step < warmup) return config_.lr + (peak - config_.lr) * double(step) / double(warmup);
  // Cosine decay to zero over the rest of training.
  const double done =
      double(step - warmup) / double(std::max<std::int64_t>(1, total_steps - warmup));
  return peak * 0.5 * (1 + std::cos(M_PI * std::min(1.0, done)));
}

void Trainer::sgd_step(const StagedNet& net, std::vector<torch::Tensor>& momentum,
                       double lr) const {
  torch::NoGradGuard no_grad;
  auto params = net->parameters();
  if (momentum.empty())
    for (const torch::Tensor& p : params) momentum.push_back(torch::zeros_like(p));
  for (std::size_t i = 0; i < params.size(); ++i) {
    torch::Tensor& p = params[i];
    if (!p.grad().defined()) continue;
    torch::Tensor step = p.grad().add(p, config_.weight_decay);
    double rate = lr;
    // LARC: weights (not biases or norms) move by at most a set fraction of their norm.
    if (config_.lars && p.dim() > 1) {
      const double weight_norm = p.norm().item<double>();
      const double step_norm = step.norm().item<double>();
      if (weight_norm > 0 && step_norm > 0)
        rate = lr * std::min(1.0, kLarsTrust * weight_norm / (lr * step_norm));
    }
    momentum[i].mul_(config_.momentum).add_(step, rate);
    p.sub_(momentum[i]);
  }
}

void Trainer::share_buffers(const StagedNet& net) {
  std::vector<torch::Tensor> buffers = float_buffers(net);
  if (buffers.empty()) return;
  std::vector<float> flat = flatten(buffers);
  comm_->broadcast(flat.data(), flat.size(), arcoll::DataType::f32, 0);
  unflatten(flat, buffers);
}

double Trainer::evaluate(StagedNet net) {
  // DDP keeps batch-norm statistics as rank 0 has them; so does the evaluation.
  share_buffers(net);
  torch::NoGradGuard no_grad;
  net->eval();
  const std::int64_t n = data_->test.labels.size(0);
  std::int64_t counts[2] = {0, 0};  // correct, seen: this rank evaluates every size()-th image
  const torch::Tensor mine = torch::arange(comm_->rank(), n, comm_->size(), torch::kInt64);
  for (std::int64_t at = 0; at < mine.size(0); at += 1000) {
    const torch::Tensor indices =
        mine.slice(0, at, std::min<std::int64_t>(at + 1000, mine.size(0)));
    const torch::Tensor predicted =
        net->forward(data_->test.images.index_select(0, indices).to(device_)).argmax(1).cpu();
    counts[0] +=
        predicted.eq(data_->test.labels.index_select(0, indices)).sum().item<std::int64_t>();
    counts[1] += indices.size(0);
  }
  net->train();
  comm_->allreduce(counts, 2, arcoll::DataType::i64, arcoll::ReduceOp::sum);
  return double(counts[0]) / double(counts[1]);
}

void Trainer::check_replicas(const StagedNet& net, const std::string& backend) {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a over every weight's bytes
  for (const torch::Tensor& p : net->parameters()) {
    const torch::Tensor c = p.detach().to(torch::kCPU).contiguous();
    const auto* bytes = static_cast<const unsigned char*>(c.data_ptr());
    for (std::size_t i = 0; i < c.numel() * sizeof(float); ++i)
      hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  std::vector<std::uint64_t> all(comm_->size());
  comm_->allgather(&hash, all.data(), 1, arcoll::DataType::i64);  // 64 bits, moved as they are
  for (int r = 1; r < comm_->size(); ++r)
    if (all[r] != all[0])
      throw std::runtime_error("the replicas diverged: rank " + std::to_string(r) +
                               "'s weights differ from rank 0's after training through " + backend +
                               " (" + config_.label() + ")");
}

double Trainer::single_rank_iteration() {
  const int iterations = untimed_iterations() + timed_sample();
  double seconds = 0;
  comm_->barrier();
  if (comm_->rank() == 0) {
    StagedNet net = build_net();
    std::vector<torch::Tensor> momentum;
    const torch::Tensor order = epoch_order(0);
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
      const auto start = Clock::now();
      const Batch b = batch(order, i % std::max<std::int64_t>(1, steps_per_epoch()));
      for (torch::Tensor& p : net->parameters()) p.mutable_grad().reset();
      torch::nn::functional::cross_entropy(net->forward(b.input), b.target).backward();
      sgd_step(net, momentum, config_.lr);
      settle();
      if (i >= untimed_iterations()) times.push_back(seconds_since(start));
    }
    seconds = quantile(times, 0.5);
  }
  // The others wait here, idle, while rank 0 measures.
  comm_->broadcast(&seconds, 1, arcoll::DataType::f64, 0);
  return seconds;
}

TrainResult Trainer::run(const std::string& backend, const ExchangeMaker& make_exchange,
                         const std::vector<double>& backward_seconds,
                         const std::function<void(const EpochPoint&)>& on_epoch) {
  TrainResult result;
  result.backend = backend;
  std::unique_ptr<GradientExchange> exchange = make_exchange(*comm_);
  result.description = exchange->description();
  StagedNet net = build_net();
  std::vector<torch::Tensor> params = net->parameters();
  {
    // One start on every rank, from rank 0's weights, as DDP does.
    std::vector<float> flat = flatten(params);
    exchange->broadcast(flat.data(), flat.size(), 0);
    unflatten(flat, params);
  }
  share_buffers(net);
  // Dropout draws its own masks on each rank.
  torch::manual_seed(config_.seed * 1000 + static_cast<std::uint64_t>(comm_->rank()) + 1);

  arcoll::replay::Policy policy = arcoll::replay::parse_policy(config_.policy);
  policy.bucket_bytes = config_.bucket_bytes;
  auto parallel =
      std::make_unique<DataParallel>(net, policy, backward_seconds, *exchange, comm_->size());
  result.buckets = parallel->plan().size();
  std::vector<torch::Tensor> momentum;
  // After a rank is lost: the survivors' communicator, an exchange and buckets on it, and the
  // weights and momentum of the rank that got furthest. A survivor whose last bytes from the
  // dead rank a reset connection dropped fails the step before the others: every one goes on
  // from the latest failed step, with the state of the lowest rank that failed it (a failed
  // step changes no weight). Returns that step.
  auto carry_on = [&](std::int64_t failed_at, const std::exception_ptr& failure,
                      double failed_step) {
    const auto shrink_start = Clock::now();
    parallel.reset();
    exchange.reset();
    std::unique_ptr<arcoll::Communicator> survivors = comm_->shrink();
    if (survivors->size() == comm_->size()) std::rethrow_exception(failure);  // none was lost
    survivors_.push_back(std::move(survivors));
    comm_ = survivors_.back().get();
    const double shrink_seconds = seconds_since(shrink_start);
    const auto state_start = Clock::now();
    std::int64_t resume = failed_at;
    comm_->allreduce(&resume, 1, arcoll::DataType::i64, arcoll::ReduceOp::max);
    std::int32_t root = failed_at == resume ? comm_->rank() : comm_->size();
    comm_->allreduce(&root, 1, arcoll::DataType::i32, arcoll::ReduceOp::min);
    exchange = make_exchange(*comm_);
    parallel =
        std::make_unique<DataParallel>(net, policy, backward_seconds, *exchange, comm_->size());
    if (momentum.empty() && resume > 0)  // it is made at the first step
      for (const torch::Tensor& p : params) momentum.push_back(torch::zeros_like(p));
    for (std::vector<torch::Tensor>* state : {&params, &momentum}) {
      if (state->empty()) continue;
      std::vector<float> flat = flatten(*state);
      comm_->broadcast(flat.data(), flat.size(), arcoll::DataType::f32, root);
      unflatten(flat, *state);
    }
    result.lost.push_back(
        {resume, failed_step, shrink_seconds, seconds_since(state_start), comm_->size()});
    return resume;
  };
  const std::int64_t steps = steps_per_epoch();
  const std::int64_t total_steps = steps * config_.epochs;
  const int untimed = untimed_iterations();

  reset_peak_rss();
  double exposed = 0;
  std::int64_t iterations = 0;
  double cpu_user = 0, cpu_system = 0;
  for (int epoch = 0; epoch < config_.epochs; ++epoch) {
    const torch::Tensor order = epoch_order(epoch);
    rusage before{};
    ::getrusage(RUSAGE_SELF, &before);
    const auto epoch_start = Clock::now();
    double loss_sum = 0;
    for (std::int64_t step = 0; step < steps; ++step) {
      const auto start = Clock::now();
      if (config_.kill_rank == first_rank_ && epoch * steps + step == config_.kill_step)
        ::raise(SIGKILL);
      const Batch b = batch(order, step);
      for (torch::Tensor& p : params) p.mutable_grad().reset();
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(net->forward(b.input), b.target);
      double waited = 0;
      try {
        parallel->begin_iteration();
        loss.backward();
        const auto backward_end = Clock::now();
        parallel->finish_iteration();
        waited = seconds_since(backward_end);
      } catch (const std::exception&) {
        if (!config_.elastic) throw;
        const std::int64_t resume =
            carry_on(epoch * steps + step, std::current_exception(), seconds_since(start));
        if (resume / steps != epoch)
          throw std::runtime_error("the survivors of a lost rank failed in different epochs");
        step = resume % steps - 1;  // that step again, among the survivors, re-sharded
        continue;
      }
      // A parameter server that keeps the weights has stepped them already.
      if (!exchange->returns_weights())
        sgd_step(net, momentum, learning_rate(epoch * steps + step, total_steps));
      loss_sum += loss.item<double>();
      if (epoch * steps + step >= untimed) {
        result.iteration_seconds.push_back(seconds_since(start));
        exposed += waited;
      }
      ++iterations;
    }
    const double epoch_seconds = seconds_since(epoch_start);
    rusage after{};
    ::getrusage(RUSAGE_SELF, &after);
    cpu_user += cpu_seconds(after.ru_utime) - cpu_seconds(before.ru_utime);
    cpu_system += cpu_seconds(after.ru_stime) - cpu_seconds(before.ru_stime);
    result.training_seconds += epoch_seconds;
    if (info_.data == DataKind::fashion_mnist) {
      parallel->settle_weights();
      EpochPoint point{epoch + 1, result.training_seconds, evaluate(net),
                       loss_sum / double(std::max<std::int64_t>(1, steps))};
      result.curve.push_back(point);
      on_epoch(point);
      if (!result.time_to_target && point.accuracy >= config_.target_accuracy)
        result.time_to_target = point.train_seconds;
      result.final_accuracy = point.accuracy;
    }
  }
  result.peak_rss_mib = peak_rss_mib();
  result.cpu_user_percent = 100 * cpu_user / std::max(1e-9, result.training_seconds);
  result.cpu_system_percent = 100 * cpu_system / std::max(1e-9, result.training_seconds);
  result.bytes_allreduced = double(parallel->bytes_per_iteration()) * double(iterations);
  result.exposed_seconds =
      result.iteration_seconds.empty() ? 0 : exposed / double(result.iteration_seconds.size());
  parallel->settle_weights();
  check_replicas(net, backend);
  final_weights_.clear();
  for (const torch::Tensor& p : params) final_weights_.push_back(p.detach().clone());
  return result;
}

void Trainer::settle() const {
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());
}

int Trainer::untimed_iterations() const {
  return info_.data == DataKind::imagenet ? config_.warmup_iterations : kUntimedIterations;
}

int Trainer::timed_sample() const {
  // Synthetic data trains few, slow iterations: as many as the run times.
  return info_.data == DataKind::imagenet ? config_.steps_per_epoch - config_.warmup_iterations
                                          : 10;
}

Trainer::StageTimes Trainer::profile_stages(int iterations) {
  StagedNet net = build_net();
  std::vector<torch::Tensor> momentum;
  const auto& stages = net->stages();
  const std::size_t n = stages.size();
  std::vector<std::vector<double>> forward(n), backward(n);
  std::vector<double> other, totals;  // totals: each iteration's whole time
  const torch::Tensor order = epoch_order(0);
  const std::int64_t steps = std::max<std::int64_t>(1, steps_per_epoch());
  comm_->barrier();
  for (int i = 0; i < untimed_iterations() + iterations; ++i) {
    const auto start = Clock::now();
    const Batch b = batch(order, i % steps);
    for (torch::Tensor& p : net->parameters()) p.mutable_grad().reset();
    double before_forward = seconds_since(start);
    // Forward stage by stage; a hook on each stage's output marks when its gradient is back,
    // which is when that stage's own backward begins.
    std::vector<double> forward_times(n), grad_arrival(n, -1);
    const auto clock_zero = Clock::now();
    torch::Tensor x = b.input;
    for (std::size_t s = 0; s < n; ++s) {
      const auto t = Clock::now();
      x = stages[s].forward(x);
      settle();
      forward_times[s] = seconds_since(t);
      if (x.requires_grad())
        x.register_hook([this, &grad_arrival, s, clock_zero](torch::Tensor) {
          settle();  // on a GPU, the gradient is there once its kernels are done
          grad_arrival[s] = seconds_since(clock_zero);
        });
    }
    const torch::Tensor loss = torch::nn::functional::cross_entropy(x, b.target);
    const double backward_start = seconds_since(clock_zero);
    loss.backward();
    settle();
    const double backward_end = seconds_since(clock_zero);
    const auto step_start = Clock::now();
    sgd_step(net, momentum, config_.lr);
    settle();
    const double after_backward = seconds_since(step_start);
    if (i < untimed_iterations()) continue;
    for (std::size_t s = 0; s < n; ++s) {
      forward[s].push_back(forward_times[s]);
      // Stage s's backward: from its output's gradient (the loss's, for the last) to its
      // input's (the end of backward, for the first).
      const double begin = s + 1 == n ? backward_start : grad_arrival[s];
      const double end = s == 0 ? backward_end : grad_arrival[s - 1];
      backward[s].push_back(std::max(0.0, end - std::max(0.0, begin)));
    }
    other.push_back(before_forward + after_backward);
    totals.push_back(before_forward + backward_end + after_backward);
  }
  // Medians on each rank, then the mean over the ranks.
  std::vector<double> flat;
  for (auto& v : forward) flat.push_back(quantile(v, 0.5));
  for (auto it = backward.rbegin(); it != backward.rend(); ++it) flat.push_back(quantile(*it, 0.5));
  flat.push_back(quantile(other, 0.5));
  comm_->allreduce(flat.data(), flat.size(), arcoll::DataType::f64, arcoll::ReduceOp::avg);
  // A synchronous iteration waits for its slowest rank: where ranks share cores their
  // iterations vary, and the expected slowest of N draws is about the N/(N+1) quantile of every
  // rank's iteration times. The stages are scaled to it (1 for a rank alone).
  std::vector<double> pooled(totals.size() * static_cast<std::size_t>(comm_->size()));
  comm_->allgather(totals.data(), pooled.data(), totals.size(), arcoll::DataType::f64);
  const double ranks = comm_->size();
  const double scale = quantile(pooled, ranks / (ranks + 1)) / quantile(pooled, 0.5);
  for (double& t : flat) t *= scale;
  StageTimes times;
  times.forward.assign(flat.begin(), flat.begin() + n);
  times.backward.assign(flat.begin() + n, flat.begin() + 2 * n);
  times.other = {flat.back()};
  return times;
}

void reduce_result(arcoll::Communicator& comm, int batch, TrainResult& result) {
  double maxima[5] = {quantile(result.iteration_seconds, 0.5),
                      quantile(result.iteration_seconds, 0.95), result.exposed_seconds,
                      result.peak_rss_mib, result.training_seconds};
  comm.allreduce(maxima, 5, arcoll::DataType::f64, arcoll::ReduceOp::max);
  double means[2] = {result.cpu_user_percent, result.cpu_system_percent};
  comm.allreduce(means, 2, arcoll::DataType::f64, arcoll::ReduceOp::avg);
  result.iteration_p50 = maxima[0];
  result.iteration_p95 = maxima[1];
  result.exposed_seconds = maxima[2];
  result.peak_rss_mib = maxima[3];
  result.training_seconds = maxima[4];
  result.cpu_user_percent = means[0];
  result.cpu_system_percent = means[1];
  if (result.iteration_p50 > 0) {
    result.samples_per_second = double(comm.size()) * batch / result.iteration_p50;
    if (result.single_rank_iteration > 0)
      result.scaling_efficiency = result.single_rank_iteration / result.iteration_p50;
  }
}

}  // namespace arbench::train
