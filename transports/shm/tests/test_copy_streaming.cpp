// Whether a collective that only copies streams its stores (ARCOLL_COPY_STREAMING_BYTES) is
// each rank's own: its size defaults to a share of the rank's own last-level cache. A rank that
// streams sends its large messages through the rings, one that does not has them read across
// and copied with their sender, so ranks that differ meet both ways in one call. Every block of
// all-gather, all-to-all, gather, scatter and broadcast must arrive, with every other rank
// streaming, on 2, 3 and 4 ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "tests/support/ranks.hpp"

namespace arcoll::testing {
namespace {

class ShmCopyStreaming : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport() != "shm") GTEST_SKIP() << "the shm. run's test";
  }
};

// The byte at `i` of the block that rank `from` gives rank `to` (or all, for to = 0).
std::uint8_t block_byte(int from, int to, std::size_t i) {
  return static_cast<std::uint8_t>(from * 37 + to * 11 + i * 7 + 3);
}

// Runs each copying collective on blocks of `block` bytes; the exit code says which went wrong.
int copy_blocks(Communicator& comm, std::size_t block) {
  const int size = comm.size(), rank = comm.rank();
  const auto n = static_cast<std::size_t>(size);
  std::vector<std::uint8_t> mine(block), all(block * n), out(block * n);
  auto expect_blocks = [&](const std::vector<std::uint8_t>& got, bool to_me) {
    for (int from = 0; from < size; ++from)
      for (std::size_t i = 0; i < block; ++i)
        if (got[static_cast<std::size_t>(from) * block + i] !=
            block_byte(from, to_me ? rank : 0, i))
          return false;
    return true;
  };
  for (std::size_t i = 0; i < block; ++i) mine[i] = block_byte(rank, 0, i);
  comm.allgather(mine.data(), all.data(), block, DataType::u8);
  if (!expect_blocks(all, false)) return 3;
  const int root = size - 1;
  std::fill(all.begin(), all.end(), 0);
  comm.gather(mine.data(), all.data(), block, DataType::u8, root);
  if (rank == root && !expect_blocks(all, false)) return 4;
  for (int to = 0; to < size; ++to)
    for (std::size_t i = 0; i < block; ++i)
      all[static_cast<std::size_t>(to) * block + i] = block_byte(rank, to, i);
  comm.alltoall(all.data(), out.data(), block, DataType::u8);
  if (!expect_blocks(out, true)) return 5;
  std::vector<std::uint8_t> got(block);
  comm.scatter(all.data(), got.data(), block, DataType::u8, root);
  for (std::size_t i = 0; i < block; ++i)
    if (got[i] != block_byte(root, rank, i)) return 6;
  if (rank != 1 % size) std::fill(mine.begin(), mine.end(), 0);
  comm.broadcast(mine.data(), block, DataType::u8, 1 % size);
  for (std::size_t i = 0; i < block; ++i)
    if (mine[i] != block_byte(1 % size, 0, i)) return 7;
  return 0;
}

TEST_F(ShmCopyStreaming, RanksThatStreamAndRanksThatDoNotAgree) {
  for (int streaming_parity : {0, 1})
    for (int world : {2, 3, 4}) {
      LocalLaunchOptions options;
      options.ranks = world;
      const auto exits = launch(options, [streaming_parity] {
        const bool streams = std::atoi(std::getenv("ARCOLL_RANK")) % 2 == streaming_parity;
        ::setenv("ARCOLL_COPY_STREAMING_BYTES", streams ? "0" : "1G", 1);
        auto comm = Communicator::from_env();
        for (std::size_t block :
             {std::size_t{40'961}, std::size_t{600'011}, std::size_t{2'100'003}})
          if (const int wrong = copy_blocks(*comm, block)) return wrong;
        return 0;
      });
      for (const RankExit& e : exits)
        EXPECT_TRUE(e.ok()) << world << " ranks, streaming parity " << streaming_parity << ":\n"
                            << describe(exits);
    }
}

}  // namespace
}  // namespace arcoll::testing
