#include "replay/predict.hpp"

#include <algorithm>

namespace arcoll::replay {

namespace {

// MXNet's kvstore pattern: a layer's push_pull starts when its backward is done (one stream,
// in order) and must be back before that layer's forward in the next iteration, so it may
// overlap the rest of backward and the forward of the layers before it. Iterations run until
// their time settles; the last one is the steady state.
Prediction predict_parameter_server(const ReplayConfig& config, const std::vector<Bucket>& plan,
                                    const AllreduceTime& push_pull_seconds, Prediction p) {
  const auto& layers = config.model.layers;
  const std::size_t n = layers.size();
  // Which bucket holds each layer's tensors (layers in forward order), if any.
  std::vector<int> bucket_of(n, -1);
  for (std::size_t b = 0; b < plan.size(); ++b) bucket_of[n - 1 - plan[b].ready_after] = int(b);
  std::vector<double> seconds(plan.size());
  for (std::size_t b = 0; b < plan.size(); ++b) {
    seconds[b] = push_pull_seconds(plan[b].elements * sizeof(float));
    p.communication += seconds[b];
  }
  std::vector<double> back(plan.size(), 0);  // when each bucket's pull is back
  double now = 0, last = 0;
  for (int iteration = 0; iteration < 4; ++iteration) {
    const double start = now;
    for (std::size_t l = 0; l < n; ++l) {
      if (bucket_of[l] >= 0) now = std::max(now, back[static_cast<std::size_t>(bucket_of[l])]);
      now += forward_seconds(config, layers[l]);
    }
    double stream = now;
    for (std::size_t l = n; l-- > 0;) {
      now += backward_seconds(config, layers[l]);
      if (bucket_of[l] < 0) continue;
      const auto b = static_cast<std::size_t>(bucket_of[l]);
      stream = std::max(stream, now) + seconds[b];
      back[b] = stream;
    }
    last = now - start;
  }
  p.iteration = last;
  p.exposed = p.iteration - p.compute;
  return p;
}

}  // namespace

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
  if (config.policy.kind == PolicyKind::ps)
    return predict_parameter_server(config, plan, allreduce_seconds, p);
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
