#include "layer_profile.hpp"

#include <nlohmann/json.hpp>

#include "arbench/files.hpp"
#include "data_parallel.hpp"

namespace arbench::train {

void write_layer_profile(const std::string& path, const StagedNet& net, const std::string& name,
                         int batch, const Trainer::StageTimes& times) {
  nlohmann::json layers = nlohmann::json::array();
  layers.push_back({{"name", "step"},
                    {"parameters", 0},
                    {"forward_seconds", times.other.at(0)},
                    {"backward_seconds", 0.0}});
  const arcoll::replay::Model model = replay_model(net, name);
  const std::size_t n = model.layers.size();
  for (std::size_t s = 0; s < n; ++s) {
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : model.layers[s].params) tensors.push_back(t.shape);
    nlohmann::json layer = {{"name", model.layers[s].name},
                            {"forward_seconds", times.forward.at(s)},
                            {"backward_seconds", times.backward.at(n - 1 - s)}};
    if (tensors.empty())
      layer["parameters"] = 0;
    else
      layer["tensors"] = tensors;
    layers.push_back(layer);
  }
  const nlohmann::json file = {{"name", name + "-measured"}, {"batch", batch}, {"layers", layers}};
  write_atomically(path, file.dump(2) + "\n");
}

arcoll::replay::Prediction predict_iteration_from_profile(const arcoll::Communicator& comm,
                                                          const std::string& path,
                                                          const TrainConfig& config) {
  arcoll::replay::ReplayConfig replay;
  replay.model = arcoll::replay::load_model(path);
  replay.batch = config.batch;
  replay.policy = arcoll::replay::parse_policy(config.policy);
  replay.policy.bucket_bytes = config.bucket_bytes;
  replay.algorithm = config.algorithm;
  std::vector<double> backward;
  for (auto it = replay.model.layers.rbegin(); it != replay.model.layers.rend(); ++it)
    backward.push_back(arcoll::replay::backward_seconds(replay, *it));
  const auto plan = arcoll::replay::plan_buckets(replay.model, replay.policy, backward);
  // A 16-bit wire carries half the bytes.
  const std::size_t wire_divisor = config.wire == arcoll::DataType::f32 ? 1 : 2;
  return arcoll::replay::predict_iteration(replay, plan, [&](std::size_t bytes) {
    return comm.predict_allreduce(bytes / wire_divisor, config.algorithm).seconds;
  });
}

}  // namespace arbench::train
