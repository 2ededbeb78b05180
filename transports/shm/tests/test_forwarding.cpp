// Reduced chunks written on as they land (Request::forward, through halving-doubling's last
// rounds): every way a forwarded piece takes through the shm transport, checked against the
// reference. Straight into the ring to the partner (chunks that fit beside the next one
// given); queued behind a full ring and copied from the buffer (1 MiB chunks: one given and
// one returning do not fit together); sent whole after a message held before its receive
// (small calls back to back); reduced out of a peer's memory (read across processes, or in
// place from arcoll::mem_alloc). Halves of several chunks are returned as reduced only on
// calls with streaming stores (ARCOLL_STREAMING_BYTES=0 makes every call one). What each
// transport reports forwarding on closing (ARCOLL_LOG=debug) shows the ways were taken.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

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
void check_counts(Communicator& comm, std::initializer_list<std::size_t> counts,
                  Memory memory = Memory::heap) {
  std::size_t salt = 0;
  for (std::size_t count : counts)
    for (bool in_place : {false, true})
      for (auto [type, op] :
           {std::pair{DataType::f32, ReduceOp::sum}, std::pair{DataType::f64, ReduceOp::max},
            std::pair{DataType::bf16, ReduceOp::sum}}) {
        ASSERT_EQ(allreduce_wrong(comm, type, op, count, ++salt, in_place, memory), 0u)
            << label(type, op, count, in_place) << " on " << comm.size() << " ranks";
      }
}

// What the ranks' shm transports forwarded, summed as they report it on closing.
struct Forwarded {
  double written = 0, queued = 0, whole = 0, read_in_place = 0, read_across = 0;
  bool cross_memory_denied = false;  // then nothing is read in place (Yama ptrace_scope)
};

// Runs `body` on `world` ranks of halving-doubling with `env`, checks that every rank ended
// well, and returns their exits.
std::vector<RankExit> run_halving_doubling(int world, std::map<std::string, std::string> env,
                                           const std::function<void()>& body) {
  LocalLaunchOptions options;
  options.ranks = world;
  options.env = std::move(env);
  options.env["ARCOLL_ALGO"] = "halving_doubling";
  auto exits = launch(options, [&] {
    body();
    return 0;
  });
  EXPECT_EQ(exits.size(), static_cast<std::size_t>(world));
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
  return exits;
}

// run_halving_doubling with a communicator from the environment, and what was forwarded.
Forwarded run_forwarding(int world, std::map<std::string, std::string> env, const RankBody& body) {
  env["ARCOLL_LOG"] = "debug";
  const auto exits = run_halving_doubling(world, std::move(env), [&] {
    body(*Communicator::from_env());  // closing the communicator reports what it forwarded
  });
  Forwarded sum;
  for (const auto& e : exits) {
    sum.written += std::max(0.0, number_after(e.output, "forwarded as they landed: "));
    sum.queued += std::max(0.0, number_after(e.output, " written into the ring, "));
    sum.whole += std::max(0.0, number_after(e.output, "messages forwarded whole: "));
    sum.read_in_place += std::max(0.0, number_after(e.output, "messages read in place: "));
    sum.read_across += std::max(0.0, number_after(e.output, "messages read across: "));
    sum.cross_memory_denied |= denied_cross_memory(e);
  }
  return sum;
}

TEST_F(ShmForwarding, ChunksWrittenOnQueuedOrSentWholeMatchTheReference) {
  Forwarded all;
  for (const char* chunk : {"16K", "1M"})
    for (const char* streaming : {"0", "1G"})
      for (int world : {2, 3, 4}) {
        const Forwarded f = run_forwarding(
            world, {{"ARCOLL_CHUNK_BYTES", chunk}, {"ARCOLL_STREAMING_BYTES", streaming}},
            [](Communicator& comm) {
              check_counts(comm, {1, 3, 4099, 40'961, 600'011});
            });
        // Every run forwards halves of one message, and most fragments find room in the ring
        // (which of the three ways the others take depends on timing). A transport that
        // stopped forwarding would still compute the right results.
        EXPECT_GT(f.written, 0) << chunk << " chunks, streaming from " << streaming << ", " << world
                                << " ranks";
        all.queued += f.queued;
        all.whole += f.whole;
      }
  // Over the whole run (hundreds of 1 MiB returns behind 1 MiB given, tens of small calls
  // whose message came first), the other two ways are taken too.
  EXPECT_GT(all.queued, 0);
  EXPECT_GT(all.whole, 0);
}

// Into rings written with streaming stores (as while a peer's core is far): pieces reduced in
// cache, then streamed into the ring and copied into the receive buffer.
TEST_F(ShmForwarding, ChunksForwardedIntoStreamedRingsMatchTheReference) {
  for (const char* streaming : {"0", "1G"})
    for (int world : {2, 3}) {
      const Forwarded f = run_forwarding(world,
                                         {{"ARCOLL_CHUNK_BYTES", "64K"},
                                          {"ARCOLL_SHM_RING_STORES", "streaming"},
                                          {"ARCOLL_STREAMING_BYTES", streaming}},
                                         [](Communicator& comm) {
                                           check_counts(comm, {4099, 40'961, 600'011});
                                         });
      EXPECT_GT(f.written, 0) << "streaming from " << streaming << ", " << world << " ranks";
    }
}

// Messages read from the sender's memory across processes; shared buffers too, as their calls
// here stream and are then sent as any other.
TEST_F(ShmForwarding, ChunksReducedOutOfAPeersMemoryMatchTheReference) {
  for (int world : {2, 3}) {
    const Forwarded f =
        run_forwarding(world,
                       {{"ARCOLL_CHUNK_BYTES", "64K"},
                        {"ARCOLL_SHM_SINGLE_COPY_PIPELINED_BYTES", "4K"},
                        {"ARCOLL_STREAMING_BYTES", "0"}},
                       [](Communicator& comm) {
                         check_counts(comm, {4099, 600'011});
                         check_allreduce(comm, 11, Coverage::sampled, Memory::shared);
                       });
    EXPECT_GT(f.written, 0) << world << " ranks";
  }
}

// All-reduces of 2-16 MiB on 2 ranks go in whole halves where the cache holds them
// (src/core/calls.cpp): each rank reads its partner's half across processes, and the result it
// forwards, sent whole, is read back across. Of the calls here, f32 of 2.4 and 4 MiB, f64 of
// 4.8 and 8 MiB and bf16 of 2 MiB and 14 B do so; bf16 of 1.2 MiB goes in chunks.
TEST_F(ShmForwarding, HalvesOfMiddleSizedAllReducesAreReadAcrossWhole) {
  const Forwarded f = run_forwarding(2, {}, [](Communicator& comm) {
    assume_last_level_cache(comm, std::size_t{1} << 30);  // holds every call
    check_counts(comm, {600'011, 1'048'583});
  });
  if (f.cross_memory_denied) GTEST_SKIP() << "cross-memory attach is not allowed here";
  // 10 calls in that band, in place and not, each rank reading two messages a call and
  // forwarding one.
  EXPECT_GE(f.read_across, 2 * 2 * 10);
  EXPECT_GE(f.whole, 2 * 10);
  // Where the cache window ends before twice the call (a 32 MiB cache: 4 MiB on 2 ranks), the
  // same calls go in chunks of 512 KiB through the rings.
  const Forwarded chunked = run_forwarding(2, {}, [](Communicator& comm) {
    assume_last_level_cache(comm, std::size_t{32} << 20);
    check_counts(comm, {600'011, 1'048'583});
  });
  EXPECT_EQ(chunked.read_across, 0.0);
}

// Forwarded results of messages read in place from arcoll::mem_alloc: the partner reads them
// in place too, sent whole once reduced, never copied into the ring. The halves of the last
// round, given and returned in one message each (1 MiB chunks), are 586 KiB: read in place.
TEST_F(ShmForwarding, ResultsOfMessagesReadInPlaceAreSentWhole) {
  for (auto [world, count] :
       {std::pair{2, std::size_t{300'007}}, std::pair{4, std::size_t{600'011}}}) {
    const Forwarded f =
        run_forwarding(world, {{"ARCOLL_CHUNK_BYTES", "1M"}, {"ARCOLL_STREAMING_BYTES", "1G"}},
                       [count](Communicator& comm) {
                         for (bool in_place : {false, true})
                           EXPECT_EQ(allreduce_wrong(comm, DataType::f32, ReduceOp::sum, count, 3,
                                                     in_place, Memory::shared),
                                     0u)
                               << label(DataType::f32, ReduceOp::sum, count, in_place) << " on "
                               << comm.size() << " ranks";
                       });
    if (f.cross_memory_denied) GTEST_SKIP() << "cross-memory attach is not allowed here";
    // Every rank reads its partner's half, and its returned result, in place, twice.
    EXPECT_GE(f.read_in_place, 2 * 2 * world) << world << " ranks";
    EXPECT_GE(f.whole, 2 * world) << world << " ranks";
    EXPECT_EQ(f.written + f.queued, 0) << world << " ranks";
  }
}

// Shared buffers go through the rings, as heap buffers do, while the peer's core is far (its
// ring written with streaming stores: ARCOLL_SHM_RING_STORES=streaming stands in for the
// measured pace), from the call after the rank saw it; and where it is near, one call in 64 of
// those read in place goes through the rings, to time them again. The sizes are those of
// ResultsOfMessagesReadInPlaceAreSentWhole, whose messages are all read in place: one call
// alone writes nothing into the rings.
TEST_F(ShmForwarding, SharedBuffersGoThroughTheRingsWhereThePeersCoreIsFarAndAreTimedAgain) {
  const std::map<std::string, std::string> in_place = {{"ARCOLL_CHUNK_BYTES", "1M"},
                                                       {"ARCOLL_STREAMING_BYTES", "1G"}};
  for (auto [world, count] :
       {std::pair{2, std::size_t{300'007}}, std::pair{4, std::size_t{600'011}}}) {
    auto calls = [count](int n) {
      return [count, n](Communicator& comm) {
        for (int call = 0; call < n; ++call)
          ASSERT_EQ(allreduce_wrong(comm, DataType::f32, ReduceOp::sum, count, call, call % 2,
                                    Memory::shared),
                    0u)
              << "call " << call << " on " << comm.size() << " ranks";
      };
    };
    const Forwarded one = run_forwarding(world, in_place, calls(1));
    if (one.cross_memory_denied) GTEST_SKIP() << "cross-memory attach is not allowed here";
    ASSERT_GT(one.read_in_place, 0) << world << " ranks";
    ASSERT_EQ(one.written + one.queued, 0) << world << " ranks";
    auto far = in_place;
    far["ARCOLL_SHM_RING_STORES"] = "streaming";
    const Forwarded f = run_forwarding(world, far, calls(6));
    // Only the first call reads in place (twice one call's reads leaves room for its timing).
    EXPECT_LE(f.read_in_place, 2 * one.read_in_place) << world << " ranks";
    EXPECT_GT(f.written + f.queued, 0) << world << " ranks";
    const Forwarded near = run_forwarding(world, in_place, calls(66));
    // Most calls still read in place (on 4 ranks some messages land before their receive and
    // take another way: in one run, 66 calls read 838 where one call read 16).
    EXPECT_GE(near.read_in_place, 30 * one.read_in_place) << world << " ranks";
    EXPECT_GT(near.written + near.queued, 0) << world << " ranks: no call was timed again";
  }
}

// Streaming stores are each rank's own setting: a rank that returns its reduced chunks one at
// a time meets a partner that exchanges its halves whole, on the same messages. Either may
// stream, with chunks copied through the rings or read from the sender's memory (whose
// acknowledgements follow returned chunks in the ring).
TEST_F(ShmForwarding, RanksThatStreamAndRanksThatDoNotAgree) {
  const std::map<std::string, std::string> rings = {{"ARCOLL_CHUNK_BYTES", "16K"},
                                                    {"ARCOLL_TIMEOUT", "10"}};
  const std::map<std::string, std::string> read_across = {{"ARCOLL_CHUNK_BYTES", "256K"},
                                                          {"ARCOLL_SHM_SINGLE_COPY_PIPELINED_BYTES", "4K"},
                                                          {"ARCOLL_TIMEOUT", "10"}};
  // Shared buffers: a rank that does not stream has its partner read its large messages in
  // place, one that streams sends them through the ring.
  const std::map<std::string, std::string> in_place = {{"ARCOLL_CHUNK_BYTES", "1M"},
                                                       {"ARCOLL_TIMEOUT", "10"}};
  for (const auto& [env, memory] :
       {std::pair{rings, Memory::heap}, std::pair{read_across, Memory::heap},
        std::pair{in_place, Memory::shared}})
    for (int streaming_parity : {0, 1})
      for (int world : {2, 3, 4}) {
        run_halving_doubling(world, env, [&] {
          const bool streams = std::atoi(std::getenv("ARCOLL_RANK")) % 2 == streaming_parity;
          ::setenv("ARCOLL_STREAMING_BYTES", streams ? "0" : "1G", 1);
          check_counts(*Communicator::from_env(), {1, 4099, 40'961, 131'073, 600'011}, memory);
        });
      }
}

}  // namespace
}  // namespace arcoll::testing
