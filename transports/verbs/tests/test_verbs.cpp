// The verbs transport's own tests, on its run (verbs., over the emulated device: no RDMA
// hardware here), beside the whole suite that run also passes: error completions of each kind
// named on every rank, a peer dying in the middle of large transfers, registered buffers freed
// and allocated again, credits returned to a rank that has left; and, on any run, that without
// a device --transport verbs fails at once saying so.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "arcoll/error.hpp"
#include "arcoll/memory.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"
#include "tests/support/scratch.hpp"
#include "transports/verbs/device.hpp"
#include "transports/verbs/verbs_transport.hpp"

namespace arcoll::testing {
namespace {

class Verbs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport() != "verbs") GTEST_SKIP() << "the verbs. run's test";
  }
  static LocalLaunchOptions options(int ranks, std::map<std::string, std::string> env = {}) {
    LocalLaunchOptions o;
    o.ranks = ranks;
    o.env = std::move(env);
    o.env.emplace("ARCOLL_TIMEOUT", "30");
    o.failure_grace = std::chrono::seconds(20);
    return o;
  }
};

// Runs large and small all-reduces until one fails; prints the error and how long the failed
// call took.
int allreduce_until_error(Communicator& comm) {
  std::vector<float> buffer(300'007, 1.0f);
  for (int i = 0; i < 200; ++i) {
    const auto start = std::chrono::steady_clock::now();
    try {
      const std::size_t count = i % 2 == 0 ? buffer.size() : 100;
      comm.allreduce(buffer.data(), count, DataType::f32, ReduceOp::sum);
    } catch (const Error& e) {
      std::printf("detected after %.4f s: %s\n", seconds_since(start), e.what());
      return 0;
    }
  }
  return 3;
}

// A send that the device fails (the peer stopped answering; the peer refused the key): the
// rank that saw it names the peer and what the device said, every other rank fails through its
// abort, within moments.
TEST_F(Verbs, ErrorCompletionsFailEveryRankNamingThePeer) {
  for (const auto& [fault, said] :
       {std::pair{"retry:40", "is not answering (retry exceeded"},
        std::pair{"access:40", "refused an RDMA write (remote access error"}}) {
    SCOPED_TRACE(fault);
    auto exits = launch(options(3), [&] {
      if (std::string(std::getenv("ARCOLL_RANK")) == "1") ::setenv("ARCOLL_VERBS_FAULT", fault, 1);
      auto comm = Communicator::from_env();
      return allreduce_until_error(*comm);
    });
    std::string all;
    for (const auto& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_LT(e.seconds, 15.0) << describe(exits);
      all += e.output;
    }
    EXPECT_NE(exits[1].output.find(said), std::string::npos) << exits[1].output;
    EXPECT_NE(all.find("rank 1 aborted"), std::string::npos) << all;
  }
}

// A rank killed while large messages are on their way (announced, cleared, being written):
// every survivor fails naming it, within moments, and gives back what it held.
TEST_F(Verbs, APeerDyingMidTransferIsNamedByEverySurvivor) {
  for (int seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    auto exits = launch(options(4), [&] {
      auto comm = Communicator::from_env();
      comm->barrier();
      std::thread killer;
      if (comm->rank() == 2)
        killer = std::thread([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(5 * seed));
          ::raise(SIGKILL);
        });
      const int status = allreduce_until_error(*comm);
      if (killer.joinable()) killer.detach();
      return status;
    });
    expect_survivors_named(exits, 2, 10.0);
  }
}

// Buffers of mem_alloc are registered once and kept; freed, their registration goes with them,
// and a buffer allocated again (often at the same address) is registered anew: results stay
// right through many such turns, with messages written straight into the receive buffers
// (all-gather and broadcast land as copies).
TEST_F(Verbs, BuffersFreedAndAllocatedAgainAreRegisteredAnew) {
  run_ranks(3, [](Communicator& comm) {
    constexpr std::size_t kCount = 50'000;  // 200 KB per rank: sent by rendezvous
    for (int turn = 0; turn < 6; ++turn) {
      auto* mine = static_cast<float*>(mem_alloc(kCount * sizeof(float)));
      auto* all = static_cast<float*>(mem_alloc(comm.size() * kCount * sizeof(float)));
      for (std::size_t i = 0; i < kCount; ++i) mine[i] = float(comm.rank() * 1000 + turn) + float(i % 7);
      comm.allgather(mine, all, kCount, DataType::f32);
      for (int r = 0; r < comm.size(); ++r)
        for (std::size_t i = 0; i < kCount; i += 997)
          ASSERT_EQ(all[r * kCount + i], float(r * 1000 + turn) + float(i % 7)) << turn;
      comm.broadcast(all, comm.size() * kCount, DataType::f32, turn % comm.size());
      mem_free(mine);
      mem_free(all);
    }
  });
}

// A rank that leaves right after its last message: the credits its peer returns for those
// messages then find no one, and that is no failure. Rank 1 sends half its credits' worth and
// leaves; rank 0 takes the messages only once rank 1's process has ended (its pid through a
// scratch file), so the credits it owes go out to a peer gone, then it goes on with rank 2.
TEST_F(Verbs, CreditsReturnedToARankThatHasLeftAreNoFailure) {
  const ScratchFolder folder("arcoll-verbs");
  const std::string pid_file = folder.path() + "/rank1.pid";
  auto exits = launch(options(3), [&] {
    auto comm = Communicator::from_env();
    int value = 0;
    if (comm->rank() == 1) {
      for (int i = 0; i < verbs::kSlots / 2; ++i) comm->send(&i, sizeof i, 0, 7);
      comm.reset();  // says goodbye, then the process ends
      mark(pid_file, std::to_string(::getpid()));
      return 0;
    }
    if (comm->rank() == 0) {
      int pid = 0;
      if (came_within(pid_file.c_str(), 10))
        if (std::FILE* f = std::fopen(pid_file.c_str(), "r")) {
          if (std::fscanf(f, "%d", &pid) != 1) pid = 0;
          std::fclose(f);
        }
      // Ended: reaped already (no such process), or its pidfd says so within 10 s.
      if (pid <= 0) return 5;
      const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
      if (pidfd < 0 && errno != ESRCH) return 5;
      if (pidfd >= 0) {
        pollfd ended{pidfd, POLLIN, 0};
        const bool gone = ::poll(&ended, 1, 10'000) == 1;
        ::close(pidfd);
        if (!gone) return 5;
      }
      for (int i = 0; i < verbs::kSlots / 2; ++i) {
        comm->recv(&value, sizeof value, 1, 7);
        if (value != i) return 6;
      }
    }
    // Ranks 0 and 2 go on together.
    const int peer = 2 - comm->rank();
    for (int i = 0; i < 3; ++i) {
      int sent = comm->rank() * 10 + i;
      comm->sendrecv(&sent, sizeof sent, peer, &value, sizeof value, peer, 9);
      if (value != peer * 10 + i) return 7;
    }
    return 0;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
}

// Where the host has no RDMA device, --transport verbs fails at once on every rank, saying so.
TEST_F(Verbs, WithoutADeviceItFailsAtOnceSayingSo) {
  if (verbs::has_rdma_device()) GTEST_SKIP() << "this host has an RDMA device";
  LocalLaunchOptions options;
  options.ranks = 2;
  // The real device, where the verbs run's environment names the emulated one.
  options.env = {
      {"ARCOLL_TRANSPORT", "verbs"}, {"ARCOLL_TIMEOUT", "30"}, {"ARCOLL_VERBS_DEVICE", "hca"}};
  auto exits = launch_refused_joins(options);
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_LT(e.seconds, 1.0) << describe(exits);
    EXPECT_NE(e.output.find("no RDMA device"), std::string::npos) << e.output;
  }
}

}  // namespace
}  // namespace arcoll::testing
