// The networks the replayer trains: each layer's trainable tensors (name, shape) and its
// compute per sample, in forward order; backward produces the gradients in reverse.
// Built-in models are written from their reference (torchvision) definitions, one file each in
// replay/models/, registered by name; a user's model comes from a JSON or CSV file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "src/base/registry.hpp"

namespace arcoll::replay {

struct Tensor {
  std::string name;  // "layer1.0.conv1.weight", as the reference names it
  std::vector<std::int64_t> shape;
  std::int64_t elements() const;
};

struct Layer {
  std::string name;            // "layer1.0.conv1"
  std::vector<Tensor> params;  // trainable tensors, in registration order (may be none)
  double forward_flops = 0;    // per sample
  double backward_flops = 0;   // per sample: gradients for the input and for the weights
  // Times measured for one iteration at Model::measured_batch, when a model file gives times
  // instead of FLOPs; negative when not given.
  double forward_seconds = -1;
  double backward_seconds = -1;
};

struct Model {
  std::string name;
  int image_size = 0;         // input height and width the FLOPs are for (0: not an image model)
  int measured_batch = 0;     // the batch of the layers' measured times, if any
  std::vector<Layer> layers;  // forward order

  std::int64_t parameter_count() const;
  std::size_t tensor_count() const;
  double forward_flops() const;  // per sample, whole network
  double backward_flops() const;
};

struct ModelInfo {
  static constexpr const char* kKind = "model";
  std::string name;
  std::string summary;
  int default_image_size = 224;
  std::function<Model(int image_size)> build;
};

using ModelRegistry = Registry<ModelInfo>;
using ModelRegistrar = Registrar<ModelInfo>;

// A built-in model by name at `image_size` (0: its default); throws std::invalid_argument
// naming the known models.
Model build_model(const std::string& name, int image_size = 0);

// A model from a file, layers in forward order. JSON: {"name": ..., "batch": n (for times),
// "layers": [{"name": ..., "tensors": [[shape], ...] or "parameters": n, "forward_flops" and
// "backward_flops" (per sample) or "forward_seconds" and "backward_seconds" (per iteration
// at the batch)}]}. CSV: a header line naming columns among layer, parameters,
// forward_flops, backward_flops, forward_seconds, backward_seconds, then one line per layer.
// Throws std::runtime_error naming the file, the line or field, and what is wrong.
Model load_model(const std::string& path);

// What a --model flag names: a built-in model (at `image_size`, 0: its default), else a model
// file when the name has an extension; otherwise the error names the known models.
Model model_named(const std::string& name_or_path, int image_size = 0);

}  // namespace arcoll::replay
