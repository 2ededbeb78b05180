// One configuration of data-parallel SGD trained through one gradient exchange, measured:
// iteration times, exposed communication, accuracy per epoch, CPU and memory.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "exchange.hpp"
#include "fashion_mnist.hpp"
#include "nets.hpp"
#include "replay/policy.hpp"

namespace arbench::train {

enum class LrScaling { none, linear, sqrt };
const char* to_string(LrScaling scaling);

// What one training run is (the same on every rank).
struct TrainConfig {
  std::string model = "lenet";
  std::string policy = "buckets";
  std::size_t bucket_bytes = 25u << 20;
  std::string algorithm = "auto";
  arcoll::DataType wire = arcoll::DataType::f32;
  bool error_feedback = false;
  int batch = 32;             // per rank
  double lr = 0.05;           // at the reference global batch
  int reference_batch = 128;  // the global batch `lr` is meant for
  LrScaling lr_scaling = LrScaling::none;
  double warmup_epochs = 0;  // linear warmup from `lr` to the scaled rate (Goyal et al.)
  bool lars = false;         // layer-wise trust ratio (You et al.)
  double momentum = 0.9;
  double weight_decay = 1e-4;
  int epochs = 3;
  int steps_per_epoch = 0;    // 0: the whole shard (Fashion-MNIST); iterations (synthetic data)
  int warmup_iterations = 2;  // synthetic data: untimed iterations first
  double target_accuracy = 0.89;
  std::uint64_t seed = 1;
  // Where the model trains: "cpu", or "cuda" (rank r on GPU r modulo their count). Gradients go
  // to host buckets for the exchange either way.
  std::string device = "cpu";
  // --elastic: a failed step makes the survivors shrink() and carry on from their weights;
  // --kill RANK@STEP: that rank (of the first communicator) dies at that step (from 0).
  bool elastic = false;
  int kill_rank = -1;
  std::int64_t kill_step = -1;
  std::string label() const;  // "buckets auto f32 b32 lr0.05 none w0"
};

// Real data: iterations at the start of a run that warm caches and oneDNN's kernels, not timed.
inline constexpr int kUntimedIterations = 5;

struct EpochPoint {
  int epoch = 0;
  double train_seconds = 0;  // training time so far (evaluation excluded)
  double accuracy = 0;       // on the whole test set
  double loss = 0;           // mean training loss of the epoch
};

// A rank lost during an elastic run, and what carrying on cost: the failed step until its
// error, the shrink (agreement and new communicator), and the weights and momentum sent again
// from the new rank 0 (with the gradient exchange made anew).
struct LostRank {
  std::int64_t step = 0;  // of the run, from 0
  double failed_step_seconds = 0, shrink_seconds = 0, state_seconds = 0;
  int ranks_after = 0;
};
// What one rank measured; reduce_result() makes every rank's into the job's.
struct TrainResult {
  std::string backend;
  std::string description;
  std::vector<double> iteration_seconds;                // this rank's, timed iterations only
  double iteration_p50 = 0, iteration_p95 = 0;          // slowest rank's
  double exposed_seconds = 0;                           // per iteration, mean, slowest rank
  double samples_per_second = 0;                        // the whole job
  double single_rank_iteration = 0;                     // one rank alone, same per-rank batch
  double scaling_efficiency = 0;                        // single_rank_iteration / iteration_p50
  std::optional<double> time_to_target;                 // seconds of training
  double final_accuracy = -1;                           // -1: no evaluation (synthetic data)
  double cpu_user_percent = 0, cpu_system_percent = 0;  // of one core, mean over ranks
  double peak_rss_mib = 0;                              // largest rank
  double bytes_allreduced = 0;                          // per rank, whole run
  double training_seconds = 0;
  double weights_max_difference = -1;  // against the first backend of the configuration
  std::vector<EpochPoint> curve;
  std::size_t buckets = 0;
  std::vector<LostRank> lost;  // elastic runs
};

// Fashion-MNIST in memory (every rank holds it; each trains on its shard).
struct TrainingData {
  LabelledImages train, test;
};

class Trainer {
 public:
  Trainer(arcoll::Communicator& comm, const TrainConfig& config, const TrainingData* data);

  // The iteration time of one rank training alone (the others wait), for scaling efficiency.
  double single_rank_iteration();
  // Trains from the seed's initial weights through `exchange`; every rank's final weights
  // are checked to be identical (an error names the rank that diverged).
  // `on_epoch` hears of every evaluated epoch as it ends.
  // `make_exchange` makes the exchange on a communicator (again, after a shrink).
  using ExchangeMaker = std::function<std::unique_ptr<GradientExchange>(arcoll::Communicator&)>;
  TrainResult run(const std::string& backend, const ExchangeMaker& make_exchange,
                  const std::vector<double>& backward_seconds,
                  const std::function<void(const EpochPoint&)>& on_epoch);
  // The communicator the trainer runs on: the one it was made with, or its survivors'.
  arcoll::Communicator& communicator() { return *comm_; }
  // Each stage's forward and backward time (backward order for backward), measured with
  // every rank computing at once and no exchange; `other` is the rest of an iteration
  // (sampling the batch, the optimizer's step). Medians over `iterations`.
  struct StageTimes {
    std::vector<double> forward, backward, other;
  };
  StageTimes profile_stages(int iterations);
  // Iterations of a measurement that warm up first, and how many to time where any will do.
  int untimed_iterations() const;
  int timed_sample() const;

  // The final weights of the last run (for comparing backends).
  const std::vector<torch::Tensor>& final_weights() const { return final_weights_; }
  StagedNet build_net() const;

 private:
  struct Batch {
    torch::Tensor input, target;
  };
  Batch batch(const torch::Tensor& order, std::int64_t step) const;
  torch::Tensor epoch_order(int epoch) const;
  std::int64_t steps_per_epoch() const;
  double learning_rate(std::int64_t step, std::int64_t total_steps) const;
  void sgd_step(const StagedNet& net, std::vector<torch::Tensor>& momentum, double lr) const;
  double evaluate(StagedNet net);
  void share_buffers(const StagedNet& net);
  void check_replicas(const StagedNet& net, const std::string& backend);
  // Waits for the work queued on the GPU (its kernels run after their calls return), so that
  // a clock read after it times them.
  void settle() const;

  arcoll::Communicator* comm_;
  // The survivors' communicators of an elastic run, the last in use; the first rank this
  // process had (which --kill names).
  std::vector<std::unique_ptr<arcoll::Communicator>> survivors_;
  int first_rank_;
  TrainConfig config_;
  const NetInfo& info_;
  const TrainingData* data_;
  torch::Device device_{torch::kCPU};  // TrainConfig::device
  Batch synthetic_;
  std::vector<torch::Tensor> final_weights_;
};

// Fills the job-wide figures of `result` from every rank's (a collective); `batch` is per rank.
void reduce_result(arcoll::Communicator& comm, int batch, TrainResult& result);

}  // namespace arbench::train
