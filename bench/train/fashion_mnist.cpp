#include "fashion_mnist.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace arbench::train {
namespace {

// Mean and standard deviation of the training images' pixels (in [0, 1]).
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

[[noreturn]] void bad_file(const std::string& path, const std::string& why) {
  throw std::runtime_error("Fashion-MNIST file " + path + ": " + why);
}

std::vector<std::uint8_t> gunzip(const std::string& path) {
  if (!std::filesystem::exists(path))
    bad_file(path,
             "not found (install Debian's dataset-fashion-mnist, or point --data at a "
             "directory holding the four .gz files)");
  gzFile file = ::gzopen(path.c_str(), "rb");
  if (file == nullptr) bad_file(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  std::uint8_t block[1 << 16];
  int got = 0;
  while ((got = ::gzread(file, block, sizeof block)) > 0)
    bytes.insert(bytes.end(), block, block + got);
  int code = Z_OK;
  const std::string error = got < 0 ? ::gzerror(file, &code) : "";
  ::gzclose(file);
  if (got < 0) bad_file(path, "corrupt gzip data (" + error + ")");
  return bytes;
}

std::uint32_t big_endian(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return std::uint32_t(bytes[at]) << 24 | std::uint32_t(bytes[at + 1]) << 16 |
         std::uint32_t(bytes[at + 2]) << 8 | bytes[at + 3];
}

// The IDX header: magic 0x00000800 + dimensions, then each dimension's size. Returns them.
std::vector<std::int64_t> idx_shape(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                    std::uint32_t dimensions) {
  if (bytes.size() < 4 + 4 * dimensions) bad_file(path, "shorter than its IDX header");
  const std::uint32_t magic = big_endian(bytes, 0);
  if (magic != (0x0800u | dimensions))
    bad_file(path, "not an IDX file of unsigned bytes in " + std::to_string(dimensions) +
                       " dimensions (magic number " + std::to_string(magic) + ")");
  std::vector<std::int64_t> shape;
  std::int64_t elements = 1;
  for (std::uint32_t d = 0; d < dimensions; ++d) {
    shape.push_back(big_endian(bytes, 4 + 4 * d));
    elements *= shape.back();
  }
  const std::size_t expected = 4 + 4 * dimensions + std::size_t(elements);
  if (bytes.size() != expected)
    bad_file(path, "holds " + std::to_string(bytes.size()) + " bytes where its header promises " +
                       std::to_string(expected));
  return shape;
}

}  // namespace

LabelledImages load_fashion_mnist(const std::string& directory, const std::string& split) {
  const std::string image_path = directory + "/" + split + "-images-idx3-ubyte.gz";
  const std::string label_path = directory + "/" + split + "-labels-idx1-ubyte.gz";
  const std::vector<std::uint8_t> image_bytes = gunzip(image_path);
  const std::vector<std::uint8_t> label_bytes = gunzip(label_path);
  const auto image_shape = idx_shape(image_bytes, image_path, 3);
  const auto label_shape = idx_shape(label_bytes, label_path, 1);
  if (image_shape[1] != 28 || image_shape[2] != 28)
    bad_file(image_path, "images are " + std::to_string(image_shape[1]) + "x" +
                             std::to_string(image_shape[2]) + ", not 28x28");
  if (label_shape[0] != image_shape[0])
    bad_file(label_path, std::to_string(label_shape[0]) + " labels for " +
                             std::to_string(image_shape[0]) + " images");
  for (std::size_t i = 8; i < label_bytes.size(); ++i)
    if (label_bytes[i] > 9)
      bad_file(label_path, "label " + std::to_string(label_bytes[i]) + " at entry " +
                               std::to_string(i - 8) + " is not a class 0-9");
  const std::int64_t n = image_shape[0];
  torch::Tensor raw = torch::from_blob(const_cast<std::uint8_t*>(image_bytes.data()) + 16,
                                       {n, 1, 28, 28}, torch::kUInt8);
  LabelledImages out;
  out.images = raw.to(torch::kFloat32).div_(255.0f).sub_(kMean).div_(kStd);
  out.labels =
      torch::from_blob(const_cast<std::uint8_t*>(label_bytes.data()) + 8, {n}, torch::kUInt8)
          .to(torch::kInt64);
  return out;
}

}  // namespace arbench::train
