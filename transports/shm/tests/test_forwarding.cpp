// Reduced chunks written on as they land (Request::forward, through halving-doubling's last
// rounds): every way a forwarded piece takes through the shm transport, checked against the
// reference. Straight into the ring to the partner (chunks that fit beside the next one
// given); queued behind a full ring and copied from the buffer (1 MiB chunks: one given and
// one returning do not fit together); sent whole after a message held before its receive
// (small calls back to back); reduced out of a peer's memory (read across processes, or in
// place from arcoll::mem_alloc). Halves of several chunks are returned as reduced only on
// calls with streaming stores (ARCOLL_STREAMING_BYTES=0 makes every call one).
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

class ShmForwarding : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport() != "shm") GTEST_SKIP() << "the shm. run's test";
  }
};

// Counts whose halves take one chunk, several, and a short last one, at each chunk size.
void check_counts(Communicator& comm, std::initializer_list<std::size_t> counts) {
  std::size_t salt = 0;
  for (std::size_t count : counts)
    for (bool in_place : {false, true})
      for (auto [type, op] :
           {std::pair{DataType::f32, ReduceOp::sum}, std::pair{DataType::f64, ReduceOp::max},
            std::pair{DataType::bf16, ReduceOp::sum}}) {
        ASSERT_EQ(allreduce_wrong(comm, type, op, count, ++salt, in_place), 0u)
            << label(type, op, count, in_place) << " on " << comm.size() << " ranks";
      }
}

TEST_F(ShmForwarding, ChunksWrittenOnQueuedOrSentWholeMatchTheReference) {
  for (const char* chunk : {"16K", "1M"})
    for (const char* streaming : {"0", "1G"})
      for (int world : {2, 3, 4})
        run_ranks(world,
                  [](Communicator& comm) {
                    check_counts(comm, {1, 3, 4099, 40'961, 600'011});
                  },
                  {{"ARCOLL_ALGO", "halving_doubling"},
                   {"ARCOLL_CHUNK_BYTES", chunk},
                   {"ARCOLL_STREAMING_BYTES", streaming}});
}

// Messages read from the sender's memory: across processes, or in place where it is shared.
TEST_F(ShmForwarding, ChunksReducedOutOfAPeersMemoryMatchTheReference) {
  for (int world : {2, 3})
    run_ranks(world,
              [](Communicator& comm) {
                check_counts(comm, {4099, 600'011});
                check_allreduce(comm, 11, Coverage::sampled, Memory::shared);
              },
              {{"ARCOLL_ALGO", "halving_doubling"},
               {"ARCOLL_CHUNK_BYTES", "64K"},
               {"ARCOLL_SHM_SINGLE_COPY_BYTES", "4K"},
               {"ARCOLL_STREAMING_BYTES", "0"}});
}

// Streaming stores are each rank's own setting: a rank that returns its reduced chunks one at
// a time meets a partner that exchanges its halves whole, on the same messages.
TEST_F(ShmForwarding, RanksThatStreamAndRanksThatDoNotAgree) {
  for (int world : {2, 3, 4}) {
    LocalLaunchOptions options;
    options.ranks = world;
    options.env = {{"ARCOLL_ALGO", "halving_doubling"}, {"ARCOLL_CHUNK_BYTES", "16K"}};
    auto exits = launch(options, [] {
      const bool streams = std::atoi(std::getenv("ARCOLL_RANK")) % 2 == 0;
      ::setenv("ARCOLL_STREAMING_BYTES", streams ? "0" : "1G", 1);
      auto comm = Communicator::from_env();
      check_counts(*comm, {1, 4099, 40'961});
      return 0;
    });
    ASSERT_EQ(exits.size(), static_cast<std::size_t>(world));
    for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
  }
}

}  // namespace
}  // namespace arcoll::testing
