#include "replay/policy.hpp"

#include <cmath>
#include <stdexcept>

namespace arcoll::replay {
namespace {

const std::pair<const char*, PolicyKind> kPolicies[] = {
    {"sync-after-backward", PolicyKind::sync_after_backward},
    {"wfbp", PolicyKind::wfbp},
    {"buckets", PolicyKind::buckets},
    {"fusion", PolicyKind::fusion},
    {"ps", PolicyKind::ps},
};

}  // namespace

std::string Policy::name() const {
  for (const auto& [name, k] : kPolicies)
    if (k == kind) return name;
  return "?";
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& p : kPolicies) names.push_back(p.first);
  return names;
}

Policy parse_policy(const std::string& name) {
  for (const auto& [n, kind] : kPolicies)
    if (name == n) return Policy{.kind = kind};
  std::string known;
  for (const auto& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown policy '" + name + "' (known: " + known + ")");
}

std::vector<Bucket> plan_buckets(const Model& model, const Policy& policy,
                                 const std::vector<double>& backward_seconds) {
  std::vector<Bucket> buckets;
  Bucket open;
  std::size_t tensor = 0;  // gradient order: layers backwards, each layer's tensors backwards
  double ready_time = 0;
  long cycle = -1;  // fusion: the cycle the open bucket's gradients became ready in
  auto close = [&] {
    if (!open.tensors.empty()) buckets.push_back(open);
    open = Bucket{};
  };
  const std::size_t layers = model.layers.size();
  for (std::size_t b = 0; b < layers; ++b) {
    const Layer& layer = model.layers[layers - 1 - b];
    ready_time += b < backward_seconds.size() ? backward_seconds[b] : 0;
    if (layer.params.empty()) continue;
    if (policy.kind == PolicyKind::fusion) {
      // Horovod's background loop wakes every cycle and fuses what became ready since.
      const long now = static_cast<long>(std::floor(ready_time / policy.cycle_seconds));
      if (now != cycle) close();
      cycle = now;
    }
    for (std::size_t t = layer.params.size(); t-- > 0;) {
      const auto elements = static_cast<std::size_t>(layer.params[t].elements());
      // Horovod leaves a tensor that would overflow the fusion buffer for the next one.
      if (policy.kind == PolicyKind::fusion && !open.tensors.empty() &&
          (open.elements + elements) * sizeof(float) > policy.fusion_bytes)
        close();
      open.tensors.push_back(tensor++);
      open.elements += elements;
      open.ready_after = b;
      // DDP closes a bucket once it has reached its cap (the first one's is smaller).
      const std::size_t cap = buckets.empty() ? policy.first_bucket_bytes : policy.bucket_bytes;
      if (policy.kind == PolicyKind::buckets && open.elements * sizeof(float) >= cap) close();
    }
    // A parameter server keeps a key per layer (MXNet's kvstore), as wfbp sends a layer a time.
    if (policy.kind == PolicyKind::wfbp || policy.kind == PolicyKind::ps) close();
  }
  close();
  if (policy.kind == PolicyKind::sync_after_backward && !buckets.empty())
    buckets.back().ready_after = layers - 1;  // after the whole backward pass
  return buckets;
}

}  // namespace arcoll::replay
