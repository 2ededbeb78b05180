#include "replay/predict.hpp"

#include <algorithm>

namespace arcoll::replay {

Prediction predict_iteration(const ReplayConfig& config, const std::vector<Bucket>& plan,
                             const AllreduceTime& allreduce_seconds) {
  const auto& layers = config.model.layers;
  Prediction p;
  double now = 0;
  for (const Layer& l : layers) now += forward_seconds(config, l);
  std::vector<double> layer_end;  // backward order
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    now += backward_seconds(config, *it);
    layer_end.push_back(now);
  }
  p.compute = now;
  double stream = 0;  // when the communication stream is next free
  for (const Bucket& b : plan) {
    const double seconds = allreduce_seconds(b.elements * sizeof(float));
    stream = std::max(stream, layer_end[b.ready_after]) + seconds;
    p.communication += seconds;
  }
  p.iteration = std::max(p.compute, stream);
  p.exposed = p.iteration - p.compute;
  return p;
}

}  // namespace arcoll::replay
