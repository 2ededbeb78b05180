// How a message copied by both its ranks is cut (transports/shm/shared_copy.hpp): halves
// below 128 KiB, then chunks of 64 KiB, or of a sixteenth of larger messages, in whole pages,
// never more than kMaxSharedCopyChunks of them (the claims word counts them in 8 bits), and
// together the whole message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "transports/shm/shared_copy.hpp"

namespace arcoll::shm {
namespace {

TEST(SharedCopyChunks, NeverMoreThanTheMostAndTogetherTheWholeMessage) {
  std::uint64_t most = 0;
  // Every size around the 64 KiB chunks' end (16 x 64 KiB), every size cut in halves, and a
  // spread of sizes to 16 GiB.
  auto check = [&](std::uint64_t bytes) {
    const std::uint64_t chunk = shared_copy_chunk_bytes(bytes), chunks = shared_copy_chunks(bytes);
    EXPECT_LE(chunks, kMaxSharedCopyChunks) << bytes << " B";
    EXPECT_GE(chunks * chunk, bytes) << bytes << " B";
    EXPECT_LT((chunks - 1) * chunk, bytes) << bytes << " B: an empty last chunk";
    EXPECT_EQ(chunk % 4096, 0u) << bytes << " B";
    if (bytes < kSharedCopyBytes) EXPECT_EQ(chunks, 2u) << bytes << " B: halves";
    most = std::max(most, chunks);
  };
  for (std::uint64_t bytes = (1 << 20) - 70000; bytes < (1 << 20) + 70000; ++bytes) check(bytes);
  for (std::uint64_t bytes = kSharedHalvesBytes; bytes < kSharedCopyBytes + 4096; ++bytes)
    check(bytes);
  for (std::uint64_t bytes = kSharedCopyBytes; bytes < (std::uint64_t{16} << 30);
       bytes += bytes / 7 + 4093)
    check(bytes);
  EXPECT_EQ(most, kMaxSharedCopyChunks) << "the most is reached";
}

}  // namespace
}  // namespace arcoll::shm
