// Cross-memory attach allowed one way only: one rank may read its peers' memory and they may
// not read it, or the reverse. Ptrace rules make that happen: a process whose capabilities
// are not a superset of its target's may not read it (so root ranks read one that dropped its
// capabilities, and it may not read them); nor may one read a process that is not dumpable
// without CAP_SYS_PTRACE. Large messages are read by their receiver from the sender's memory,
// so every rank must agree not to send them that way.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "arcoll/error.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

class ShmCrossMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport() != "shm") GTEST_SKIP() << "the shm. run's test";
  }
};
class ShmCrossMemoryWorld : public ShmCrossMemory, public ::testing::WithParamInterface<int> {};

// Makes this process's memory readable by its peers while it may not read theirs (as root:
// every capability dropped), or the reverse (not root: not dumpable). Empty when neither
// could be done.
struct OneWay {
  std::string what;
  bool may_not_read = false;  // else: may not be read
};
OneWay deny_one_way() {
  if (::geteuid() == 0) {
    // Root peers hold CAP_SYS_PTRACE: a process that is not dumpable would still be read.
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {};
    if (::syscall(SYS_capset, &header, none) == 0) return {"may not read its peers", true};
    return {};
  }
  if (::prctl(PR_SET_DUMPABLE, 0) == 0) return {"may not be read by its peers", false};
  return {};
}

// Runs `world` ranks after `prepare` ran on rank 1 before its communicator was made (it
// returns 2 when it could not do its part). Point-to-point messages above the size read
// across processes, and all-reduces of buffers from arcoll::mem_alloc large enough to be read
// in place, arrive whole between every pair, both ways. Returns the exits, with what each
// transport read in place (ARCOLL_LOG=debug), none when rank 1 could not be prepared.
std::vector<RankExit> exchange_large_messages(int world, const std::function<int()>& prepare) {
  LocalLaunchOptions options;
  options.ranks = world;
  options.env["ARCOLL_ALGO"] = "halving_doubling";
  options.env["ARCOLL_LOG"] = "debug";
  auto exits = launch(options, [&] {
    if (std::atoi(std::getenv("ARCOLL_RANK")) == 1)
      if (int code = prepare(); code != 0) return code;
    auto comm = Communicator::from_env();
    constexpr std::size_t kCount = (3 << 20) / 4 + 5;  // above the 1 MiB read across processes
    std::vector<std::uint32_t> out(kCount), in(kCount);
    for (int step = 1; step < comm->size(); ++step) {
      const int to = (comm->rank() + step) % comm->size();
      const int from = (comm->rank() - step + comm->size()) % comm->size();
      std::iota(out.begin(), out.end(), static_cast<std::uint32_t>(comm->rank() * 7 + step));
      std::fill(in.begin(), in.end(), 0xABABABABu);
      comm->sendrecv(out.data(), out.size() * 4, to, in.data(), in.size() * 4, from, step);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < kCount; ++i)
        wrong += in[i] != static_cast<std::uint32_t>(from * 7 + step + i);
      EXPECT_EQ(wrong, 0u) << "from rank " << from;
    }
    EXPECT_EQ(
        allreduce_wrong(*comm, DataType::f32, ReduceOp::sum, 600'011, 3, false, Memory::shared),
        0u);
    return 0;
  });
  EXPECT_EQ(exits.size(), static_cast<std::size_t>(world));
  if (exits.size() > 1 && exits[1].exit_code == 2) return {};
  return exits;
}

// Whether the probes of `exits` found denials that the test did not make: then no rank may
// read its peers whatever rank 1 does, and nothing one-way is tested.
bool denied_between_siblings(const std::vector<RankExit>& exits, bool rank1_denied) {
  if (!rank1_denied) return denied_cross_memory(exits);
  return std::all_of(exits.begin(), exits.end(),
                     [](const RankExit& e) { return denied_cross_memory(e); });
}

// Messages a rank's transport read in place from its peers' shared memory (0 when none).
double read_in_place(const RankExit& e) {
  return std::max(0.0, number_after(e.output, "messages read in place: "));
}

// Every rank ended well and says, or does not say, that it copies through shared memory;
// where it copies, it read nothing in place.
void expect_every_rank_says_it_copies(const std::vector<RankExit>& exits, bool copies) {
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    const bool says =
        e.output.find("large messages are copied through shared memory") != std::string::npos;
    EXPECT_EQ(says, copies) << "rank " << e.rank << ":\n" << e.output;
    if (copies) {
      EXPECT_EQ(read_in_place(e), 0) << "rank " << e.rank;
    }
  }
}

// Rank 1 is denied one way: every rank says it copies through shared memory.
TEST_P(ShmCrossMemoryWorld, ARankDeniedOneWayMakesEveryRankCopyThroughTheRings) {
  const auto exits = exchange_large_messages(GetParam(), [] {
    const OneWay denied = deny_one_way();
    if (denied.what.empty()) return 2;
    std::printf("rank 1 %s\n", denied.what.c_str());
    return 0;
  });
  if (exits.empty()) GTEST_SKIP() << "cross-memory attach could not be denied one way";
  if (denied_between_siblings(exits, true))
    GTEST_SKIP() << "this host denies cross-memory attach between every pair of ranks";
  expect_every_rank_says_it_copies(exits, true);
}

// Rank 1 does not send large messages to be read from its memory (ARCOLL_SHM_SINGLE_COPY=0),
// but may read its peers', so they do not turn sending that way off: no rank says it copies,
// and rank 1 reads its peers' shared buffers in place (on 2 ranks, its peer reads nothing so).
TEST_P(ShmCrossMemoryWorld, ARankThatSendsThroughTheRingsStillReadsItsPeers) {
  const auto exits = exchange_large_messages(GetParam(), [] {
    ::setenv("ARCOLL_SHM_SINGLE_COPY", "0", 1);
    return 0;
  });
  if (denied_between_siblings(exits, false))
    GTEST_SKIP() << "this host denies cross-memory attach between ranks";
  expect_every_rank_says_it_copies(exits, false);
  ASSERT_EQ(exits.size(), static_cast<std::size_t>(GetParam()));
  EXPECT_GT(read_in_place(exits[1]), 0) << exits[1].output;
  if (GetParam() == 2) {
    EXPECT_EQ(read_in_place(exits[0]), 0) << exits[0].output;
  }
}

// Messages whose copy no sender shares (an exchange's: send/recv both ways, all-to-all, where
// every rank also receives; one-way sends below the size from which a waiting sender shares
// the copy) go through the rings where a read across costs a rank more than the rings' two
// copies, as each rank timed at setup and says at debug level, and are read across where it
// costs less; larger one-way sends are read across either way. Every message arrives whole.
TEST_F(ShmCrossMemory, UnsharedCopiesGoThroughTheRingsWhereAReadAcrossCostsMoreThanTwoCopies) {
  constexpr int kExchanges = 4, kOneWay = 3;
  LocalLaunchOptions options;
  options.ranks = 2;
  options.env["ARCOLL_LOG"] = "debug";
  const auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    const int peer = 1 - comm->rank();
    // Above the 16 KiB read across, below the 128 KiB whose copy a waiting sender shares; and
    // above that.
    constexpr std::size_t kCount = (64 << 10) / 4 + 3, kShared = (256 << 10) / 4 + 3;
    std::vector<std::uint32_t> out(2 * kShared), in(2 * kShared);
    std::size_t wrong = 0;
    for (int call = 0; call < kExchanges; ++call) {
      std::iota(out.begin(), out.end(), static_cast<std::uint32_t>(comm->rank() * 1000 + call));
      comm->sendrecv(out.data(), kCount * 4, peer, in.data(), kCount * 4, peer, call);
      for (std::size_t i = 0; i < kCount; ++i)
        wrong += in[i] != static_cast<std::uint32_t>(peer * 1000 + call + i);
      // Rank r's block b of the all-to-all is out[b * kCount...]: rank 1 - r gets block 1 - r.
      comm->alltoall(out.data(), in.data(), kCount, DataType::i32);
      for (std::size_t i = 0; i < kCount; ++i)
        wrong += in[peer * kCount + i] !=
                 static_cast<std::uint32_t>(peer * 1000 + call + comm->rank() * kCount + i);
    }
    for (int call = 0; call < kOneWay; ++call)
      for (std::size_t count : {kCount, kShared}) {
        std::iota(out.begin(), out.end(), static_cast<std::uint32_t>(call));
        if (comm->rank() == 0) {
          comm->send(out.data(), count * 4, 1, call);
          continue;
        }
        comm->recv(in.data(), count * 4, 0, call);
        for (std::size_t i = 0; i < count; ++i)
          wrong += in[i] != static_cast<std::uint32_t>(call + i);
      }
    EXPECT_EQ(wrong, 0u);
    return 0;
  });
  ASSERT_EQ(exits.size(), 2u);
  if (denied_cross_memory(exits)) GTEST_SKIP() << "this host denies cross-memory attach";
  auto through_rings = [](const RankExit& e) {
    return e.output.find("messages whose copy no sender shares go through the rings") !=
           std::string::npos;
  };
  for (const auto& e : exits) {
    ASSERT_TRUE(e.ok()) << describe(exits);
    ASSERT_TRUE(through_rings(e) ||
                e.output.find("messages whose copy no sender shares are read across") !=
                    std::string::npos)
        << e.output;
    // What this rank read across: its peer's unshared messages where the peer sends them so,
    // and on rank 1 rank 0's larger one-way sends.
    const double read = std::max(0.0, number_after(e.output, "messages read across: "));
    const bool sender_rings = through_rings(exits[static_cast<std::size_t>(1 - e.rank)]);
    const double unshared = 2 * kExchanges + (e.rank == 1 ? kOneWay : 0);
    EXPECT_EQ(read, (sender_rings ? 0 : unshared) + (e.rank == 1 ? kOneWay : 0)) << e.output;
  }
}

// Permission lost after the communicator was set up: the receiver that may not read its
// sender's buffer fails the call with a system error that names the sender and says why, not
// as if the sender had died, and the sender learns that the receiver gave up.
TEST_F(ShmCrossMemory, PermissionLostAfterSetupFailsTheCallSayingWhy) {
  LocalLaunchOptions options;
  options.ranks = 2;
  const auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    const int rank = comm->rank();
    OneWay denied;
    if (rank == 1) {
      denied = deny_one_way();
      if (denied.what.empty()) return 2;
    }
    int reader = denied.may_not_read ? 1 : 0;
    comm->broadcast(&reader, 1, DataType::i32, 1);
    std::vector<char> buffer(3 << 20, 'x');  // above the 1 MiB read across processes
    try {
      if (rank == reader)
        comm->recv(buffer.data(), buffer.size(), 1 - reader);
      else
        comm->send(buffer.data(), buffer.size(), reader);
      ADD_FAILURE() << "the message arrived although its buffer could not be read";
    } catch (const Error& e) {
      const std::string text = e.what();
      EXPECT_NE(text.find("rank " + std::to_string(1 - rank)), std::string::npos) << text;
      EXPECT_EQ(text.find("crashed"), std::string::npos) << text;
      if (rank == reader) {
        EXPECT_EQ(e.code(), ErrorCode::system) << text;
        EXPECT_NE(text.find("could not be read"), std::string::npos) << text;
      }
    }
    return 0;
  });
  ASSERT_EQ(exits.size(), 2u);
  if (exits[1].exit_code == 2) GTEST_SKIP() << "cross-memory attach could not be denied one way";
  if (denied_between_siblings(exits, false))
    GTEST_SKIP() << "this host denies cross-memory attach between ranks";
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
}

// A rank that gave up and then unmapped the buffer of a send it had posted (a large heap
// buffer is, when freed) while its receiver had not read it yet, alive still: the receiver's
// read fails (EFAULT), and it reports the abort's reason, which follows the send in the ring,
// not the failed read (a process that is gone is another case: ESRCH).
TEST_F(ShmCrossMemory, AReaderOfAnAbortedRanksFreedBufferReportsTheAbort) {
  const std::string reason = "rank 0 gave up before its message was read";
  const auto exits = abort_then_free_before_the_read(
      4 << 20, reason,  // read across processes
      {[](std::size_t bytes) -> void* {
         void* buffer =
             ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
         return buffer == MAP_FAILED ? nullptr : buffer;
       },
       [](void* buffer, std::size_t bytes) { ::munmap(buffer, bytes); }});
  ASSERT_EQ(exits.size(), 2u);
  if (denied_between_siblings(exits, false))
    GTEST_SKIP() << "this host denies cross-memory attach between ranks";
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
  for (const std::string& said : {std::string("rank 0 aborted"), reason})
    EXPECT_NE(exits[1].output.find(said), std::string::npos) << exits[1].output;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ShmCrossMemoryWorld, ::testing::Values(2, 3));

}  // namespace
}  // namespace arcoll::testing
