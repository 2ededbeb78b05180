#include "src/base/crc32c.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace arcoll {
namespace {

// The check value of CRC-32C (the CRC of the ASCII digits "123456789"), as published with
// the algorithm's parameters.
TEST(Crc32c, MatchesThePublishedCheckValue) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c_portable(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, FastPathAgreesWithTheTableAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);
  std::vector<unsigned char> data(4096 + 16);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  for (std::size_t offset = 0; offset < 8; ++offset)
    for (std::size_t length : {0u, 1u, 7u, 8u, 9u, 63u, 64u, 1000u, 4096u})
      EXPECT_EQ(crc32c(data.data() + offset, length), crc32c_portable(data.data() + offset, length))
          << "offset " << offset << " length " << length;
}

TEST(Crc32c, ContinuesAcrossPiecesAndSeesOneFlippedBit) {
  std::vector<unsigned char> data(1000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 31);
  const std::uint32_t whole = crc32c(data.data(), data.size());
  EXPECT_EQ(crc32c(data.data() + 333, 667, crc32c(data.data(), 333)), whole);
  data[500] ^= 0x10;
  EXPECT_NE(crc32c(data.data(), data.size()), whole);
}

}  // namespace
}  // namespace arcoll
