#include "data_parallel.hpp"

#include <cstring>

namespace arbench::train {

arcoll::replay::Model replay_model(const StagedNet& net, const std::string& name) {
  arcoll::replay::Model model;
  model.name = name;
  for (const auto& stage : net->stages()) {
    arcoll::replay::Layer layer;
    layer.name = stage.name;
    for (const auto& item : stage.module->named_parameters())
      layer.params.push_back({stage.name + "." + item.key(), item.value().sizes().vec()});
    model.layers.push_back(std::move(layer));
  }
  return model;
}

std::vector<torch::Tensor> gradient_order(const StagedNet& net) {
  std::vector<torch::Tensor> order;
  const auto& stages = net->stages();
  for (auto stage = stages.rbegin(); stage != stages.rend(); ++stage) {
    const auto params = stage->module->parameters();
    for (auto p = params.rbegin(); p != params.rend(); ++p) order.push_back(*p);
  }
  return order;
}

DataParallel::DataParallel(const StagedNet& net, const arcoll::replay::Policy& policy,
                           const std::vector<double>& backward_seconds, GradientExchange& exchange,
                           int world)
    : policy_(policy),
      plan_(arcoll::replay::plan_buckets(replay_model(net, ""), policy, backward_seconds)),
      exchange_(exchange),
      scale_(1.0f / static_cast<float>(world)) {
  const std::vector<torch::Tensor> params = gradient_order(net);
  slots_.resize(params.size());
  buckets_.resize(plan_.size());
  for (std::size_t b = 0; b < plan_.size(); ++b) {
    std::size_t offset = 0;
    for (std::size_t tensor : plan_[b].tensors) {
      slots_[tensor] = {params[tensor], b, offset, false};
      buckets_[b].slots.push_back(tensor);
      offset += static_cast<std::size_t>(params[tensor].numel());
    }
    buckets_[b].buffer.assign(offset, 0.0f);
  }
  {
    std::vector<std::pair<float*, std::vector<float>>> initial;
    for (BucketState& bucket : buckets_) {
      std::vector<float> weights(bucket.buffer.size());
      for (std::size_t s : bucket.slots) {
        const torch::Tensor values = slots_[s].param.detach().to(torch::kCPU).contiguous();
        std::memcpy(weights.data() + slots_[s].offset, values.data_ptr<float>(),
                    values.numel() * sizeof(float));
      }
      initial.emplace_back(bucket.buffer.data(), std::move(weights));
    }
    exchange_.prepare(initial);
  }
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    torch::Tensor param = slots_[s].param;
    const unsigned handle =
        param.register_hook([this, s](torch::Tensor grad) { arrived(s, grad); });
    hooks_.emplace_back(param, handle);
  }
}

DataParallel::~DataParallel() {
  for (auto& [param, handle] : hooks_) param.remove_hook(handle);
  // An iteration that failed half way may leave all-reduces running on our buffers.
  for (BucketState& bucket : buckets_) {
    if (!bucket.pending) continue;
    try {
      bucket.pending();
    } catch (...) {
    }
  }
}

std::size_t DataParallel::bytes_per_iteration() const {
  std::size_t bytes = 0;
  for (const BucketState& bucket : buckets_) bytes += bucket.buffer.size() * sizeof(float);
  return bytes;
}

void DataParallel::begin_iteration() {
  for (Slot& slot : slots_) slot.arrived = false;
  for (BucketState& bucket : buckets_) {
    bucket.missing = bucket.slots.size();
    bucket.started = false;
    bucket.pending = nullptr;
  }
  next_bucket_ = 0;
}

void DataParallel::arrived(std::size_t s, const torch::Tensor& grad) {
  Slot& slot = slots_[s];
  BucketState& bucket = buckets_[slot.bucket];
  torch::Tensor contiguous = grad.to(torch::kCPU).contiguous();
  float* into = bucket.buffer.data() + slot.offset;
  // A parameter whose gradient comes in parts (used twice in forward) is summed here.
  if (slot.arrived) {
    const float* from = contiguous.data_ptr<float>();
    for (std::int64_t i = 0; i < contiguous.numel(); ++i) into[i] += from[i];
    return;
  }
  std::memcpy(into, contiguous.data_ptr<float>(), contiguous.numel() * sizeof(float));
  slot.arrived = true;
  --bucket.missing;
  if (policy_.kind != arcoll::replay::PolicyKind::sync_after_backward) start_ready_buckets(false);
}

void DataParallel::start_ready_buckets(bool all) {
  while (next_bucket_ < buckets_.size() && (all || buckets_[next_bucket_].missing == 0)) {
    BucketState& bucket = buckets_[next_bucket_++];
    for (std::size_t s : bucket.slots) {
      const Slot& slot = slots_[s];
      if (!slot.arrived)
        std::memset(bucket.buffer.data() + slot.offset, 0, slot.param.numel() * sizeof(float));
    }
    bucket.pending = exchange_.start_sum(bucket.buffer.data(), bucket.buffer.size());
    bucket.started = true;
  }
}

void DataParallel::finish_iteration() {
  start_ready_buckets(true);
  for (BucketState& bucket : buckets_) {
    Pending pending = std::move(bucket.pending);
    bucket.pending = nullptr;
    pending();
  }
  unpack_buckets();
}

void DataParallel::unpack_buckets() {
  torch::NoGradGuard no_grad;
  const bool weights = exchange_.returns_weights();
  for (BucketState& bucket : buckets_) {
    for (std::size_t s : bucket.slots) {
      Slot& slot = slots_[s];
      torch::Tensor values =
          torch::from_blob(bucket.buffer.data() + slot.offset, slot.param.sizes(), torch::kFloat32);
      if (weights) {
        slot.param.copy_(values);
        continue;
      }
      torch::Tensor& grad = slot.param.mutable_grad();
      if (grad.defined())
        grad.copy_(values).mul_(scale_);
      else
        grad = values.mul(scale_).to(slot.param.device());
    }
  }
}

void DataParallel::settle_weights() {
  if (!exchange_.returns_weights()) return;
  for (BucketState& bucket : buckets_) exchange_.latest_weights(bucket.buffer.data());
  unpack_buckets();
}

}  // namespace arbench::train
