#include "replay/model.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace arcoll::replay {

std::int64_t Tensor::elements() const {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1},
                         [](std::int64_t a, std::int64_t b) { return a * b; });
}

std::int64_t Model::parameter_count() const {
  std::int64_t n = 0;
  for (const Layer& l : layers)
    for (const Tensor& t : l.params) n += t.elements();
  return n;
}

std::size_t Model::tensor_count() const {
  std::size_t n = 0;
  for (const Layer& l : layers) n += l.params.size();
  return n;
}

double Model::forward_flops() const {
  double f = 0;
  for (const Layer& l : layers) f += l.forward_flops;
  return f;
}

double Model::backward_flops() const {
  double f = 0;
  for (const Layer& l : layers) f += l.backward_flops;
  return f;
}

Model build_model(const std::string& name, int image_size) {
  const ModelInfo* info = ModelRegistry::instance().find(name);
  if (info == nullptr) {
    throw std::invalid_argument("unknown model '" + name +
                                "' (known: " + ModelRegistry::instance().name_list() +
                                ", or a .json/.csv model file)");
  }
  return info->build(image_size > 0 ? image_size : info->default_image_size);
}

Model model_named(const std::string& name_or_path, int image_size) {
  if (ModelRegistry::instance().find(name_or_path) == nullptr &&
      name_or_path.find('.') != std::string::npos)
    return load_model(name_or_path);
  return build_model(name_or_path, image_size);
}

namespace {

using Json = nlohmann::json;

[[noreturn]] void bad(const std::string& path, const std::string& where, const std::string& why) {
  throw std::runtime_error("model file " + path + ": " + where + ": " + why);
}

// A finite number >= 0 (FLOPs, seconds, parameters).
double non_negative(const Json& value, const std::string& path, const std::string& where) {
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < 0)
    bad(path, where, "must be a number >= 0");
  return value.get<double>();
}

// Which of the two ways of giving compute a layer used; every layer must use the same one.
enum class Compute { unknown, flops, seconds };

void set_compute(Layer& layer, Compute& compute, double forward, double backward, Compute kind,
                 const std::string& path, const std::string& where) {
  if (compute != Compute::unknown && compute != kind)
    bad(path, where, "mixes FLOPs and seconds with the layers before it: give one of them");
  compute = kind;
  if (kind == Compute::flops) {
    layer.forward_flops = forward;
    layer.backward_flops = backward;
  } else {
    layer.forward_seconds = forward;
    layer.backward_seconds = backward;
  }
}

// A layer of `parameters` elements in one tensor: files that give only sizes.
Tensor flat_tensor(const std::string& layer, double parameters, const std::string& path,
                   const std::string& where) {
  if (parameters != std::floor(parameters) || parameters > 1e13)
    bad(path, where, "must be a whole number of parameters");
  return {layer + ".weight", {static_cast<std::int64_t>(parameters)}};
}

Model load_json(const std::string& path, const std::string& text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    bad(path, "byte " + std::to_string(e.byte), "not valid JSON");
  }
  if (!root.is_object()) bad(path, "top level", "must be an object");
  Model model;
  model.name = root.value("name", path);
  if (!model.name.size()) bad(path, "name", "must not be empty");
  if (root.contains("batch")) {
    const double batch = non_negative(root["batch"], path, "batch");
    if (batch < 1 || batch != std::floor(batch)) bad(path, "batch", "must be a whole number >= 1");
    model.measured_batch = static_cast<int>(batch);
  }
  if (!root.contains("layers") || !root["layers"].is_array() || root["layers"].empty())
    bad(path, "layers", "must be a non-empty array of layers");
  Compute compute = Compute::unknown;
  for (std::size_t i = 0; i < root["layers"].size(); ++i) {
    const Json& entry = root["layers"][i];
    const std::string where = "layers[" + std::to_string(i) + "]";
    if (!entry.is_object()) bad(path, where, "must be an object");
    Layer layer;
    if (!entry.contains("name") || !entry["name"].is_string())
      bad(path, where + ".name", "must be a string");
    layer.name = entry["name"].get<std::string>();
    if (entry.contains("tensors")) {
      const Json& tensors = entry["tensors"];
      if (!tensors.is_array()) bad(path, where + ".tensors", "must be an array of shapes");
      for (std::size_t t = 0; t < tensors.size(); ++t) {
        const std::string at = where + ".tensors[" + std::to_string(t) + "]";
        if (!tensors[t].is_array() || tensors[t].empty())
          bad(path, at, "must be a shape: an array of dimensions");
        Tensor tensor{layer.name + "." + std::to_string(t), {}};
        for (const Json& d : tensors[t]) {
          if (!d.is_number_integer() || d.get<std::int64_t>() < 1)
            bad(path, at, "dimensions must be whole numbers >= 1");
          tensor.shape.push_back(d.get<std::int64_t>());
        }
        layer.params.push_back(std::move(tensor));
      }
    } else if (entry.contains("parameters")) {
      const double n = non_negative(entry["parameters"], path, where + ".parameters");
      if (n > 0) layer.params.push_back(flat_tensor(layer.name, n, path, where + ".parameters"));
    }
    const bool flops = entry.contains("forward_flops") || entry.contains("backward_flops");
    const bool seconds = entry.contains("forward_seconds") || entry.contains("backward_seconds");
    if (flops == seconds)
      bad(path, where,
          flops ? "gives both FLOPs and seconds"
                : "needs forward_flops and backward_flops, or "
                  "forward_seconds and backward_seconds");
    const char* forward = flops ? "forward_flops" : "forward_seconds";
    const char* backward = flops ? "backward_flops" : "backward_seconds";
    if (!entry.contains(forward) || !entry.contains(backward))
      bad(path, where, std::string("needs both ") + forward + " and " + backward);
    set_compute(layer, compute, non_negative(entry[forward], path, where + "." + forward),
                non_negative(entry[backward], path, where + "." + backward),
                flops ? Compute::flops : Compute::seconds, path, where);
    model.layers.push_back(std::move(layer));
  }
  if (compute == Compute::seconds && model.measured_batch == 0)
    bad(path, "batch", "is needed with seconds: the batch the times were measured at");
  return model;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells;
  std::stringstream stream(line);
  std::string cell;
  while (std::getline(stream, cell, ',')) {
    cell.erase(0, cell.find_first_not_of(" \t"));
    cell.erase(cell.find_last_not_of(" \t\r") + 1);
    cells.push_back(cell);
  }
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

Model load_csv(const std::string& path, const std::string& text) {
  std::stringstream lines(text);
  std::string line;
  int number = 0;
  std::vector<std::string> columns;
  while (columns.empty() && std::getline(lines, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") != std::string::npos) columns = split_csv(line);
  }
  auto column = [&](const char* name) {
    return static_cast<int>(std::find(columns.begin(), columns.end(), name) - columns.begin());
  };
  const int n = static_cast<int>(columns.size());
  const int layer_at = column("layer"), parameters_at = column("parameters");
  const bool flops = column("forward_flops") < n && column("backward_flops") < n;
  const bool seconds = column("forward_seconds") < n && column("backward_seconds") < n;
  if (layer_at >= n || parameters_at >= n || flops == seconds)
    bad(path, "line " + std::to_string(number),
        "the header must name layer, parameters, and forward_flops and backward_flops or "
        "forward_seconds and backward_seconds");
  const int forward_at = column(flops ? "forward_flops" : "forward_seconds");
  const int backward_at = column(flops ? "backward_flops" : "backward_seconds");
  Model model;
  model.name = path;
  const int batch_at = column("batch");
  Compute compute = Compute::unknown;
  while (std::getline(lines, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "line " + std::to_string(number);
    const auto cells = split_csv(line);
    if (static_cast<int>(cells.size()) != n)
      bad(path, where,
          std::to_string(cells.size()) + " cells where the header has " + std::to_string(n));
    auto number_at = [&](int index) {
      char* end = nullptr;
      const double v = std::strtod(cells[static_cast<std::size_t>(index)].c_str(), &end);
      if (cells[static_cast<std::size_t>(index)].empty() || *end != '\0' || !std::isfinite(v) ||
          v < 0)
        bad(path, where + ", " + columns[static_cast<std::size_t>(index)],
            "'" + cells[static_cast<std::size_t>(index)] + "' is not a number >= 0");
      return v;
    };
    Layer layer;
    layer.name = cells[static_cast<std::size_t>(layer_at)];
    if (layer.name.empty()) bad(path, where + ", layer", "is empty");
    const double parameters = number_at(parameters_at);
    if (parameters > 0)
      layer.params.push_back(flat_tensor(layer.name, parameters, path, where + ", parameters"));
    set_compute(layer, compute, number_at(forward_at), number_at(backward_at),
                flops ? Compute::flops : Compute::seconds, path, where);
    if (batch_at < n) model.measured_batch = static_cast<int>(number_at(batch_at));
    model.layers.push_back(std::move(layer));
  }
  if (model.layers.empty())
    bad(path, "line " + std::to_string(number), "no layers after the header");
  if (seconds && model.measured_batch < 1)
    bad(path, "batch", "a batch column (>= 1) is needed with seconds");
  return model;
}

}  // namespace

Model load_model(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("model file " + path + ": cannot be read");
  std::stringstream buffer;
  buffer << file.rdbuf();
  const std::string text = buffer.str();
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  const bool json = path.ends_with(".json") || (first != std::string::npos && text[first] == '{');
  return json ? load_json(path, text) : load_csv(path, text);
}

}  // namespace arcoll::replay
