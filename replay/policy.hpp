// Framework policies: how a training framework groups the gradients into all-reduces and when
// it starts each one during backward.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "replay/model.hpp"

namespace arcoll::replay {

enum class PolicyKind {
  sync_after_backward,  // one all-reduce of every gradient once backward is over (Caffe-MPI)
  wfbp,                 // each layer's gradients as soon as its backward is done
  buckets,              // PyTorch DDP: buckets filled in gradient order, sent when full
  fusion,               // Horovod: what became ready in a cycle, fused up to a threshold
  ps,                   // MXNet's kvstore: push a layer's gradients when ready, pull them
                        // back before that layer's next forward (a parameter server)
};

struct Policy {
  PolicyKind kind = PolicyKind::buckets;
  std::size_t bucket_bytes = 25u << 20;       // DDP's bucket_cap_mb
  std::size_t first_bucket_bytes = 1u << 20;  // DDP's smaller first bucket
  std::size_t fusion_bytes = 128u << 20;      // HOROVOD_FUSION_THRESHOLD
  double cycle_seconds = 1e-3;                // HOROVOD_CYCLE_TIME
  std::string name() const;
};

// "sync-after-backward", "wfbp", "buckets", "fusion", "ps"; throws std::invalid_argument naming
// them.
Policy parse_policy(const std::string& name);
std::vector<std::string> policy_names();

// One all-reduce: gradient tensors (indices into the model's tensors in gradient order) and when
// it may start: once backward has finished layer `ready_after` (an index into the layers in
// backward order).
struct Bucket {
  std::vector<std::size_t> tensors;
  std::size_t elements = 0;
  std::size_t ready_after = 0;
};

// The all-reduces (ps: push_pulls, a layer's tensors each) of one iteration in the order every
// rank issues them. `backward_seconds[i]` is the i-th layer's backward time in backward order
// (fusion groups by when gradients become ready).
std::vector<Bucket> plan_buckets(const Model& model, const Policy& policy,
                                 const std::vector<double>& backward_seconds);

}  // namespace arcoll::replay
