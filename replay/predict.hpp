// The performance model of one synchronous SGD iteration: forward, then backward layer by
// layer; each all-reduce of the policy may start once its last gradient is ready and once the
// one before it has ended (one communication stream, as the replay runs them); the iteration
// ends when backward and the last all-reduce have. All-reduce times come from the library's
// cost model, for the communicator at hand or for a described cluster. Under the ps policy
// they are the push_pulls' times, and a layer's forward waits for its pull from the
// iteration before.
#pragma once

#include <cstddef>
#include <functional>

#include "replay/replay.hpp"

namespace arcoll::replay {

struct Prediction {
  double iteration = 0;
  double compute = 0;
  double communication = 0;  // sum of the all-reduces
  double exposed = 0;        // iteration - compute
};

using AllreduceTime = std::function<double(std::size_t bytes)>;

Prediction predict_iteration(const ReplayConfig& config, const std::vector<Bucket>& plan,
                             const AllreduceTime& allreduce_seconds);

}  // namespace arcoll::replay
