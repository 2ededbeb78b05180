// The built-in models against the published figures of their reference (torchvision)
// definitions, and model files.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>

#include "replay/model.hpp"

namespace arcoll::replay {
namespace {

struct Published {
  const char* model;
  std::int64_t parameters;  // torchvision's num_params
  std::size_t tensors;      // len(list(model.parameters()))
  double gmacs;             // torchvision's GFLOPS figure, which counts multiply-adds
};

// From torchvision's model documentation (ImageNet weights: 224x224, 299x299 for Inception-v3).
const Published kPublished[] = {
    {"alexnet", 61'100'840, 16, 0.714},       {"vgg16", 138'357'544, 32, 15.47},
    {"resnet50", 25'557'032, 161, 4.089},     {"googlenet", 6'624'904, 173, 1.498},
    {"inception_v3", 27'161'264, 292, 5.713},
};

class Models : public ::testing::TestWithParam<Published> {};

TEST_P(Models, MatchThePublishedParameterTensorAndComputeCounts) {
  const Published& p = GetParam();
  const Model model = build_model(p.model);
  EXPECT_EQ(model.parameter_count(), p.parameters);
  EXPECT_EQ(model.tensor_count(), p.tensors);
  // Our count adds batch norm, pooling and biases to the multiply-adds: within 3%.
  EXPECT_NEAR(model.forward_flops() / 2 / 1e9, p.gmacs, p.gmacs * 0.03);
  EXPECT_GT(model.backward_flops(), 1.9 * model.forward_flops());
  std::set<std::string> names;
  for (const Layer& l : model.layers)
    for (const Tensor& t : l.params) EXPECT_TRUE(names.insert(t.name).second) << t.name;
}

INSTANTIATE_TEST_SUITE_P(Reference, Models, ::testing::ValuesIn(kPublished),
                         [](const auto& info) { return std::string(info.param.model); });

TEST(Models, TensorsCarryTheReferenceNamesAndShapes) {
  const Model resnet = build_model("resnet50");
  EXPECT_EQ(resnet.layers.front().params.front().name, "conv1.weight");
  EXPECT_EQ(resnet.layers.front().params.front().shape, (std::vector<std::int64_t>{64, 3, 7, 7}));
  // Backward produces gradients in reverse: the classifier's first.
  EXPECT_EQ(resnet.layers.back().params.front().name, "fc.weight");
  EXPECT_EQ(resnet.layers.back().params.front().shape, (std::vector<std::int64_t>{1000, 2048}));
  const Model inception = build_model("inception_v3");
  bool aux = false;
  for (const Layer& l : inception.layers) aux = aux || l.name == "AuxLogits.fc";
  EXPECT_TRUE(aux);
  EXPECT_EQ(inception.image_size, 299);
}

TEST(Models, LargerImagesCostMoreComputeButNoParametersInConvolutionalLayers) {
  const Model small = build_model("resnet50", 224), large = build_model("resnet50", 320);
  EXPECT_EQ(small.parameter_count(), large.parameter_count());
  EXPECT_GT(large.forward_flops(), 1.9 * small.forward_flops());
  EXPECT_THROW(build_model("alexnet", 32), std::invalid_argument);  // pools past its edge
  EXPECT_THROW(build_model("lenet"), std::invalid_argument);
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ModelFiles, JsonAndCsvGiveLayersInForwardOrder) {
  const Model json = load_model(write_file("net.json", R"({"name": "mine", "layers": [
      {"name": "conv", "tensors": [[16, 3, 3, 3], [16]], "forward_flops": 1e6, "backward_flops": 2e6},
      {"name": "relu", "forward_flops": 1e3, "backward_flops": 1e3},
      {"name": "fc", "parameters": 1000, "forward_flops": 2e3, "backward_flops": 4e3}]})"));
  EXPECT_EQ(json.name, "mine");
  EXPECT_EQ(json.layers.size(), 3u);
  EXPECT_EQ(json.parameter_count(), 16 * 27 + 16 + 1000);
  EXPECT_EQ(json.tensor_count(), 3u);
  EXPECT_DOUBLE_EQ(json.forward_flops(), 1e6 + 1e3 + 2e3);

  const Model csv =
      load_model(write_file("net.csv",
                            "layer,parameters,forward_seconds,backward_seconds,batch\n"
                            "conv1, 9408, 0.002, 0.004, 32\n"
                            "fc, 2049000, 0.0005, 0.001, 32\n"));
  EXPECT_EQ(csv.layers.size(), 2u);
  EXPECT_EQ(csv.parameter_count(), 9408 + 2049000);
  EXPECT_EQ(csv.measured_batch, 32);
  EXPECT_DOUBLE_EQ(csv.layers[1].backward_seconds, 0.001);
}

// A malformed file fails naming the file, the place and what is wrong.
void expect_error(const std::string& name, const std::string& text, const std::string& says) {
  const std::string path = write_file(name, text);
  try {
    load_model(path);
    ADD_FAILURE() << name << " was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(says), std::string::npos) << what;
  }
}

TEST(ModelFiles, MalformedFilesAreRejectedNamingTheField) {
  expect_error("truncated.json", R"({"layers": [{"name": "a")", "not valid JSON");
  expect_error("nolayers.json", R"({"name": "x"})", "layers");
  expect_error("negative.json",
               R"({"layers": [{"name": "a", "forward_flops": -1, "backward_flops": 1}]})",
               "layers[0].forward_flops");
  expect_error(
      "shape.json",
      R"({"layers": [{"name": "a", "tensors": [[3, 0]], "forward_flops": 1, "backward_flops": 1}]})",
      "layers[0].tensors[0]");
  expect_error("mixed.json", R"({"batch": 8, "layers": [
      {"name": "a", "forward_flops": 1, "backward_flops": 1},
      {"name": "b", "forward_seconds": 1, "backward_seconds": 1}]})",
               "layers[1]");
  expect_error("nobatch.json",
               R"({"layers": [{"name": "a", "forward_seconds": 1, "backward_seconds": 1}]})",
               "batch");
  expect_error("header.csv", "name,size\nconv,3\n", "header");
  expect_error("cells.csv", "layer,parameters,forward_flops,backward_flops\nconv,3,1\n", "line 2");
  expect_error("value.csv", "layer,parameters,forward_flops,backward_flops\nconv,x,1,1\n",
               "line 2, parameters");
  EXPECT_THROW(load_model(::testing::TempDir() + "no-such-model.json"), std::runtime_error);
}

}  // namespace
}  // namespace arcoll::replay
