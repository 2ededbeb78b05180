// A broadcast's messages larger than 256 KiB are read across processes where its ranks pass
// them on down the chain (more than 2 ranks), unless a read across costs their sender more
// than the rings' two copies (its timing at setup, said at debug level); and from 128 KiB on
// 2 ranks, where the root shares the copy (Request::Receivers, shm_transport.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

TEST(ShmRelayedBroadcast, ChunksAreReadAcrossByTheirSizeAndTheRanksThatPassThemOn) {
  if (forced_transport() != "shm") GTEST_SKIP() << "the shm. run's test";
  for (int world : {2, 4}) {
    LocalLaunchOptions options;
    options.ranks = world;
    options.env["ARCOLL_LOG"] = "debug";
    options.env["ARCOLL_CHUNK_BYTES"] = "512K";
    const auto exits = launch(options, [] {
      auto comm = Communicator::from_env();
      // Two chunks of 512 KiB, then one of 148 KiB (read across on 2 ranks only).
      constexpr std::size_t kCount = 300'007;
      auto buffer = make_input(DataType::f32, ReduceOp::max, comm->rank(), kCount, 13);
      comm->broadcast(buffer.data(), kCount, DataType::f32, 0);
      return buffer == make_input(DataType::f32, ReduceOp::max, 0, kCount, 13) ? 0 : 3;
    });
    ASSERT_EQ(exits.size(), static_cast<std::size_t>(world));
    // Where the host denies cross-memory attach, every message goes through the rings.
    if (denied_cross_memory(exits)) GTEST_SKIP() << "cross-memory attach is denied here";
    for (const RankExit& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      const double across = std::max(0.0, number_after(e.output, "messages read across: "));
      // Down the chain from rank 0, each rank's chunks come from the rank before it.
      const bool sender_rings =
          e.rank > 0 &&
          exits[static_cast<std::size_t>(e.rank - 1)].output.find(
              "messages whose copy no sender shares go through the rings") != std::string::npos;
      EXPECT_EQ(across, e.rank == 0    ? 0
                        : world == 2   ? 3
                        : sender_rings ? 0
                                       : 2)
          << world << " ranks, rank " << e.rank << ":\n"
          << e.output;
    }
  }
}

}  // namespace
}  // namespace arcoll::testing
