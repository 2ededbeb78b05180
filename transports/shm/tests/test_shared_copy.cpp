// Large messages read across processes are copied by both ranks (transports/shm/
// shared_copy.cpp): the receiver from the front, the waiting sender from the back. Every byte
// arrives, whichever side took which chunk; a sender that computes holds nothing up; a sender
// killed while it copies fails its receiver naming it, and one stopped while it copies is
// ended before its receiver's call fails.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "arcoll/error.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

class ShmSharedCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport() != "shm") GTEST_SKIP() << "the shm. run's test";
  }
};

// 2 ranks whose waits last `timeout` seconds, one of which is to fail.
LocalLaunchOptions two_ranks_one_failing(const char* timeout) {
  LocalLaunchOptions options;
  options.ranks = 2;
  options.env = {{"ARCOLL_TIMEOUT", timeout}};
  options.failure_grace = std::chrono::seconds(30);
  return options;
}

// `ranks` ranks whose logs count what they copied with their senders (ARCOLL_LOG=debug).
LocalLaunchOptions counting_ranks(int ranks) {
  LocalLaunchOptions options;
  options.ranks = ranks;
  options.env["ARCOLL_LOG"] = "debug";
  return options;
}

// Sizes around the chunks: the smallest shared message, one byte more, and odd sizes whose
// last chunk is short.
const std::vector<std::size_t> kSharedCopySizes = {128 << 10, (128 << 10) + 1, (1 << 20) + 4097,
                                                   (3 << 20) + 5, (8 << 20) - 3};
constexpr int kSharedCopyRounds = 4;

TEST_F(ShmSharedCopy, OneWayMessagesOfOddSizesArriveWhole) {
  if (on_one_cpu())
    GTEST_SKIP() << "one CPU: 2 ranks share copies only where every sender only sends";
  const auto exits = launch(counting_ranks(2), [] {
    auto comm = Communicator::from_env();
    for (int round = 0; round < kSharedCopyRounds; ++round) {
      for (std::size_t bytes : kSharedCopySizes) {
        // Rank 1 receives first in even rounds, so that either side may be the one waiting.
        auto expected = make_input(DataType::u8, ReduceOp::sum, round, bytes, 7);
        if (comm->rank() == 0) {
          if (round % 2 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          comm->send(expected.data(), bytes, 1);
        } else {
          std::vector<unsigned char> got(bytes, 0);
          comm->recv(got.data(), bytes, 0);
          if (got != expected) {
            std::printf("round %d, %zu B: wrong bytes\n", round, bytes);
            return 3;
          }
        }
      }
    }
    return 0;
  });
  ASSERT_EQ(exits.size(), 2u);
  if (denied_cross_memory(exits)) GTEST_SKIP() << "cross-memory attach is denied here";
  for (const RankExit& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
  const std::string& receiver = exits[1].output;
  EXPECT_EQ(number_after(receiver, "copied with their senders: "),
            kSharedCopyRounds * kSharedCopySizes.size())
      << receiver;
  // Waiting in its send, the sender shares some: not a promise for every message.
  EXPECT_GT(number_after(receiver, "written by the senders: "), 0) << receiver;
}

// Below the chunks, a gather's messages are shared in halves where every rank has a core, and
// a scatter's are not (its root has its own block to copy).
TEST_F(ShmSharedCopy, AGathersSmallerMessagesAreSharedInHalves) {
  if (on_one_cpu()) GTEST_SKIP() << "one CPU: halves only where every rank has a core";
  const std::vector<std::size_t> blocks = {64 << 10, (64 << 10) + 1, (96 << 10) + 7,
                                           (128 << 10) - 1};
  const auto exits = launch(counting_ranks(2), [&] {
    auto comm = Communicator::from_env();
    for (int round = 0; round < kSharedCopyRounds; ++round) {
      for (std::size_t block : blocks) {
        // Bytes that name their place, so that a half landed at the other's offset shows.
        auto pattern = [&](int rank) {
          std::vector<unsigned char> bytes(block);
          for (std::size_t i = 0; i < block; ++i)
            bytes[i] = static_cast<unsigned char>((i * 131 + rank * 17 + round) % 251);
          return bytes;
        };
        const auto theirs = pattern(1), mine = pattern(comm->rank());
        std::vector<unsigned char> all(2 * block, 0), got(block, 0);
        comm->gather(mine.data(), all.data(), block, DataType::u8, 0);
        if (comm->rank() == 0 && (!std::equal(mine.begin(), mine.end(), all.begin()) ||
                                  !std::equal(theirs.begin(), theirs.end(), all.begin() + block))) {
          std::printf("gather, round %d, %zu B: wrong bytes\n", round, block);
          return 3;
        }
        comm->scatter(all.data(), got.data(), block, DataType::u8, 0);
        if (comm->rank() == 1 && got != theirs) {
          std::printf("scatter, round %d, %zu B: wrong bytes\n", round, block);
          return 4;
        }
      }
    }
    return 0;
  });
  ASSERT_EQ(exits.size(), 2u);
  if (denied_cross_memory(exits)) GTEST_SKIP() << "cross-memory attach is denied here";
  for (const RankExit& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
  EXPECT_EQ(number_after(exits[0].output, "copied with their senders: "),
            kSharedCopyRounds * blocks.size())
      << exits[0].output;
  // No line at all where it read nothing across (these go through the rings where a read
  // across costs more than two copies).
  EXPECT_EQ(std::max(0.0, number_after(exits[1].output, "copied with their senders: ")), 0)
      << exits[1].output;
}

// With more ranks than cores (all three on one CPU), a receiver offers a share only where every
// sender of the call only sends: the root of a gather does, the receivers of a scatter do not.
TEST_F(ShmSharedCopy, OnFewerCoresThanRanksOnlyCallsWhoseSendersOnlySendShare) {
  const auto exits = launch(counting_ranks(3), [] {
    if (!confine_to_cpu0()) return 2;
    auto comm = Communicator::from_env();
    constexpr std::size_t kBlock = 1 << 20;
    std::vector<unsigned char> all(3 * kBlock), mine(kBlock);
    for (int q = 0; q < 3; ++q) std::memset(all.data() + q * kBlock, 10 + q, kBlock);
    comm->scatter(all.data(), mine.data(), kBlock, DataType::u8, 0);
    if (mine != std::vector<unsigned char>(kBlock, 10 + comm->rank())) return 3;
    std::memset(mine.data(), 20 + comm->rank(), kBlock);
    comm->gather(mine.data(), all.data(), kBlock, DataType::u8, 0);
    for (int q = 0; comm->rank() == 0 && q < 3; ++q)
      if (all[q * kBlock] != 20 + q || all[(q + 1) * kBlock - 1] != 20 + q) return 4;
    return 0;
  });
  ASSERT_EQ(exits.size(), 3u);
  if (exits[0].exit_code == 2) GTEST_SKIP() << "could not confine the ranks to one CPU";
  if (denied_cross_memory(exits)) GTEST_SKIP() << "cross-memory attach is denied here";
  for (const RankExit& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_EQ(number_after(e.output, "copied with their senders: "), e.rank == 0 ? 2 : 0)
        << "rank " << e.rank << ":\n"
        << e.output;
  }
}

// A sender that posts an isend and computes takes no share: its receive completes on the
// receiver's copies alone, long before the sender comes back to wait.
TEST_F(ShmSharedCopy, AReceiveCompletesWhileItsSenderComputes) {
  LocalLaunchOptions options;
  options.ranks = 2;
  const auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    constexpr std::size_t kBytes = 6 << 20;
    auto expected = make_input(DataType::u8, ReduceOp::sum, 0, kBytes, 11);
    if (comm->rank() == 0) {
      auto work = comm->isend(expected.data(), kBytes, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      work->wait();
      return 0;
    }
    std::vector<unsigned char> got(kBytes, 0);
    const auto start = std::chrono::steady_clock::now();
    comm->recv(got.data(), kBytes, 0);
    const double seconds = seconds_since(start);
    std::printf("received after %.3f s\n", seconds);
    return got != expected ? 3 : seconds < 0.5 ? 0 : 4;
  });
  ASSERT_EQ(exits.size(), 2u);
  for (const RankExit& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
}

// Rank 0 sends 8 MiB messages until a thread of its own kills it, at a moment of no relation
// to the copies (most of its time is spent sharing them): rank 1 fails within the timeout
// naming it, whichever copy it was in.
TEST_F(ShmSharedCopy, ASenderKilledWhileItCopiesFailsItsReceiverNamingIt) {
  for (int delay_ms : {15, 40}) {
    const auto exits = launch(two_ranks_one_failing("10"), [delay_ms] {
      auto comm = Communicator::from_env();
      constexpr std::size_t kBytes = 8 << 20;
      std::vector<unsigned char> buffer(kBytes, 1);
      comm->barrier();
      if (comm->rank() == 0) {
        std::thread([delay_ms] {
          std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
          ::raise(SIGKILL);
        }).detach();
        for (;;) comm->send(buffer.data(), kBytes, 1);
      }
      const auto start = std::chrono::steady_clock::now();
      try {
        for (;;) {
          comm->recv(buffer.data(), kBytes, 0);
          if (buffer[kBytes / 2] != 1) return 5;
        }
      } catch (const Error& e) {
        std::printf("detected after %.2f s: %s\n", seconds_since(start), e.what());
        return 0;
      }
    });
    ASSERT_EQ(exits.size(), 2u);
    expect_survivors_named(exits, 0, 10.0 + 5.0);
  }
}

// A sender stopped between a chunk's claim and its count may not have written the chunk yet:
// it would write it once it ran again, into a buffer that its receiver's failed call has given
// back. The receiver cannot tell whether it has, and ends it first. Rank 0 stops itself at a
// moment of a stream of 32 MiB sends (most moments fall in its share: its writes take most of
// its time). Once its receive has failed saying it ended rank 0, rank 1 checks through a pidfd
// of rank 0 that rank 0 has ended, fills its buffer, lets a rank 0 still there run again and
// checks that nothing wrote into the buffer. Trials until two stops fell in a share.
TEST_F(ShmSharedCopy, ASenderStoppedInItsShareIsEndedBeforeItsReceiverFails) {
  if (on_one_cpu())
    GTEST_SKIP() << "one CPU: 2 ranks share copies only where every sender only sends";
  constexpr char kEnded[] = "it was ended, as it might still write";
  int stopped_in_a_share = 0;
  for (int trial = 0; trial < 16 && stopped_in_a_share < 2; ++trial) {
    const auto exits = launch(two_ranks_one_failing("2"), [trial, kEnded] {
      auto comm = Communicator::from_env();
      constexpr std::size_t kBytes = 32 << 20;
      std::vector<unsigned char> buffer(kBytes, 1);
      const int peer = 1 - comm->rank();
      pid_t mine = ::getpid(), theirs = 0;
      comm->sendrecv(&mine, sizeof mine, peer, &theirs, sizeof theirs, peer);
      if (comm->rank() == 0) {
        std::thread([trial] {
          std::this_thread::sleep_for(std::chrono::milliseconds(20 + 7 * trial));
          ::raise(SIGSTOP);
        }).detach();
        for (;;) comm->send(buffer.data(), kBytes, 1);
      }
      // Rank 0 waits in its sends for rank 1 to receive: it is there until rank 1 ends it.
      const int rank0 = static_cast<int>(::syscall(SYS_pidfd_open, theirs, 0));
      if (rank0 < 0) return 2;
      auto signal_rank0 = [&](int signal) {
        ::syscall(SYS_pidfd_send_signal, rank0, signal, nullptr, 0);
      };
      try {
        for (;;) comm->recv(buffer.data(), kBytes, 0);
      } catch (const Error& e) {
        std::printf("%s\n", e.what());
        pollfd ended{rank0, POLLIN, 0};
        if (std::strstr(e.what(), kEnded) != nullptr && ::poll(&ended, 1, 0) != 1) return 6;
        std::fill(buffer.begin(), buffer.end(), 7);
        signal_rank0(SIGCONT);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        const bool untouched =
            std::all_of(buffer.begin(), buffer.end(), [](unsigned char b) { return b == 7; });
        signal_rank0(SIGKILL);  // stopped elsewhere, it would send on
        return untouched ? 0 : 5;
      }
    });
    ASSERT_EQ(exits.size(), 2u);
    if (denied_cross_memory(exits)) GTEST_SKIP() << "cross-memory attach is denied here";
    if (exits[1].exit_code == 2) GTEST_SKIP() << "no pidfd_open here";
    EXPECT_NE(exits[1].exit_code, 6) << "rank 0 still there after the error:\n" << describe(exits);
    EXPECT_NE(exits[1].exit_code, 5) << "written into after the call failed:\n" << describe(exits);
    EXPECT_EQ(exits[1].exit_code, 0) << describe(exits);
    EXPECT_NE(exits[1].output.find("rank 0"), std::string::npos) << describe(exits);
    std::printf("trial %d: %s", trial, exits[1].output.c_str());
    if (exits[1].output.find(kEnded) != std::string::npos) ++stopped_in_a_share;
  }
  EXPECT_EQ(stopped_in_a_share, 2) << "too few stops fell in a share to check";
}

}  // namespace
}  // namespace arcoll::testing
