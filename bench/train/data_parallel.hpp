// Data parallelism as DDP and Horovod do it: hooks on every parameter catch its gradient the
// moment backward produces it, copy it into its bucket, and start that bucket's all-reduce as
// soon as the bucket is full, while backward goes on. Buckets follow the replayer's policies
// (replay/policy.hpp), in the same order on every rank.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <vector>

#include "exchange.hpp"
#include "nets.hpp"
#include "replay/model.hpp"
#include "replay/policy.hpp"

namespace arbench::train {

// The replayer's view of `net`: one layer per stage with its tensors' names and shapes.
arcoll::replay::Model replay_model(const StagedNet& net, const std::string& name);

// The parameters of `net` in gradient order (stages backwards, each stage's tensors
// backwards), the order of the replayer's bucket plans.
std::vector<torch::Tensor> gradient_order(const StagedNet& net);

class DataParallel {
 public:
  // `backward_seconds`: each stage's backward time, in backward order (the fusion policy groups
  // what becomes ready within one cycle); the same on every rank.
  DataParallel(const StagedNet& net, const arcoll::replay::Policy& policy,
               const std::vector<double>& backward_seconds, GradientExchange& exchange, int world);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Before each backward pass.
  void begin_iteration();
  // After backward: starts what the hooks did not (the whole of sync-after-backward, buckets
  // with gradients that never came, which count as zeros), waits for every bucket and leaves
  // the mean gradient over the ranks in each parameter's grad.
  void finish_iteration();

  // Exchanges that keep the weights (returns_weights): every rank takes the weights as they
  // are once all pushes so far are applied, so that replicas agree (before an evaluation, at
  // the end). Nothing for the others, whose replicas agree after every step.
  void settle_weights();

  const std::vector<arcoll::replay::Bucket>& plan() const { return plan_; }
  std::size_t bytes_per_iteration() const;

 private:
  struct Slot {  // one parameter: where its gradient goes
    torch::Tensor param;
    std::size_t bucket = 0;
    std::size_t offset = 0;  // in elements, within the bucket
    bool arrived = false;
  };
  struct BucketState {
    std::vector<float> buffer;
    std::vector<std::size_t> slots;
    std::size_t missing = 0;
    Pending pending;
    bool started = false;
  };
  void arrived(std::size_t slot, const torch::Tensor& grad);
  // The parameters' values or the mean gradient, from each bucket's buffer.
  void unpack_buckets();
  void start_ready_buckets(bool all);

  arcoll::replay::Policy policy_;
  std::vector<arcoll::replay::Bucket> plan_;
  GradientExchange& exchange_;
  float scale_;
  std::vector<Slot> slots_;
  std::vector<BucketState> buckets_;
  std::size_t next_bucket_ = 0;  // the next to start: buckets start in plan order
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
};

}  // namespace arbench::train
