#include "arbench/models.hpp"

#include <cstdio>
#include <stdexcept>

#include "arbench/text.hpp"
#include "replay/model.hpp"

namespace arbench {
namespace {

using arcoll::replay::Model;

std::string summary(const Model& m) {
  return printf_string("%-14s %8zu %14lld %10.1f %6d %12.3f %12.3f\n", m.name.c_str(),
                       m.tensor_count(), static_cast<long long>(m.parameter_count()),
                       static_cast<double>(m.parameter_count()) * 4 / (1 << 20), m.image_size,
                       m.forward_flops() / 1e9, m.backward_flops() / 1e9);
}

std::string layer_table(const Model& m) {
  std::string text = printf_string(
      "\n# %s, layers in the order backward produces their gradients\n", m.name.c_str());
  text += printf_string("# %-38s %8s %12s %12s %12s\n", "layer", "tensors", "parameters",
                        "fwd GFLOP", "bwd GFLOP");
  for (auto it = m.layers.rbegin(); it != m.layers.rend(); ++it) {
    long long parameters = 0;
    for (const auto& t : it->params) parameters += t.elements();
    text +=
        printf_string("  %-38s %8zu %12lld %12.4f %12.4f\n", it->name.c_str(), it->params.size(),
                      parameters, it->forward_flops / 1e9, it->backward_flops / 1e9);
  }
  return text;
}

}  // namespace

int run_models_command(const ModelsFlags& flags) {
  std::vector<Model> models;
  try {
    if (flags.image_size < 0) throw std::invalid_argument("--image-size must be positive");
    if (flags.model.empty()) {
      for (const auto& name : arcoll::replay::ModelRegistry::instance().names())
        models.push_back(arcoll::replay::build_model(name, flags.image_size));
    } else {
      models.push_back(arcoll::replay::model_named(flags.model, flags.image_size));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench models: --model: %s\n", e.what());
    return 2;
  }
  std::string text = printf_string("# %-12s %8s %14s %10s %6s %12s %12s\n", "model", "tensors",
                                   "parameters", "MiB (f32)", "image", "fwd GFLOP", "bwd GFLOP");
  for (const Model& m : models) text += summary(m);
  text += "# FLOPs per sample (a multiply-add counts 2)\n";
  if (flags.layers)
    for (const Model& m : models) text += layer_table(m);
  std::fputs(text.c_str(), stdout);
  return 0;
}

}  // namespace arbench
