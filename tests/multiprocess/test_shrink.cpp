// Surviving a lost rank: after a rank dies (before the agreement on survivors, during it or
// after it), is stopped past the deadline, or aborts, the others shrink() to a communicator of
// themselves, renumbered in order, whose results match the reference for the survivors; a
// stopped rank that comes back finds itself left out, with an error saying so.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "arcoll/error.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"
#include "tests/support/scratch.hpp"

namespace arcoll::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Long enough that a survivor waiting it out fails the seconds assertions.
constexpr const char* kLongTimeout = "60";
constexpr double kWellWithinTimeout = 20.0;

// All-reduces until one fails (`victim` dies before its `calls`-th); returns the error's text.
std::string allreduce_until_failure(Communicator& comm, int victim, int calls) {
  std::vector<float> data(1000, 1.0f);
  for (int i = 0;; ++i) {
    if (comm.rank() == victim && i == calls) ::raise(SIGKILL);
    try {
      comm.allreduce(data.data(), data.size(), DataType::f32, ReduceOp::sum);
    } catch (const Error& e) {
      return e.what();
    }
  }
}

// The survivors' communicator: its size, and each rank renumbered in the old order, leaving
// out `gone` (old ranks); then every type and operator against the reference for them.
void check_survivors(Communicator& old, Communicator& shrunk, const std::vector<int>& gone) {
  int expected_rank = old.rank();
  for (int g : gone) expected_rank -= g < old.rank();
  EXPECT_EQ(shrunk.size(), old.size() - static_cast<int>(gone.size()));
  EXPECT_EQ(shrunk.rank(), expected_rank);
  check_allreduce(shrunk, 7, Coverage::sampled);
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(shrunk.size()));
  const std::int32_t mine = shrunk.rank();
  shrunk.allgather(&mine, ranks.data(), 1, DataType::i32);
  for (int r = 0; r < shrunk.size(); ++r) EXPECT_EQ(ranks[static_cast<std::size_t>(r)], r);
}

// A job of `ranks` in which some are killed: survivors may wait for a silent one (the long
// timeout, which they must not reach), and they carry on after the kills.
LocalLaunchOptions with_kills(int ranks) {
  LocalLaunchOptions options;
  options.ranks = ranks;
  options.env = {{"ARCOLL_TIMEOUT", kLongTimeout}};
  options.failure_grace = std::chrono::seconds(60);
  return options;
}

// The ranks of `killed` ended by SIGKILL, the others returned 0.
void expect_killed_and_the_rest_ok(const std::vector<RankExit>& exits,
                                   const std::vector<int>& killed) {
  for (const auto& e : exits) {
    if (std::find(killed.begin(), killed.end(), e.rank) != killed.end())
      EXPECT_EQ(e.signal, SIGKILL) << describe(exits);
    else
      EXPECT_TRUE(e.ok()) << describe(exits);
  }
}

// (world size, victim killed in an all-reduce, a rank that dies in the agreement or -1, the
// round it dies entering: 1 before it proposes, 2 after its proposal went out, 0 once it has
// decided and sent its decision; whether it dies unheard: having heard every other rank in
// round 1 and sent nothing, so that the others learn of it only from the connections they
// made to it).
using Deaths = std::tuple<int, int, int, int, bool>;
class DeathsAroundTheAgreement : public ::testing::TestWithParam<Deaths> {};

TEST_P(DeathsAroundTheAgreement, SurvivorsShrinkAndComputeRight) {
  const auto [world, victim, second, round, unheard] = GetParam();
  LocalLaunchOptions options = with_kills(world);
  if (second >= 0)
    options.env["ARCOLL_FAULT_AGREEMENT"] =
        std::to_string(second) + ":" + std::to_string(round) + (unheard ? ":unheard" : "");
  auto exits = launch(options, [&] {
    auto comm = Communicator::from_env();
    const std::string failure = allreduce_until_failure(*comm, victim, 3);
    const auto start = Clock::now();
    auto shrunk = comm->shrink();
    std::printf("shrunk to %d ranks in %.4f s after: %s\n", shrunk->size(), seconds_since(start),
                failure.c_str());
    std::vector<int> gone{victim};
    if (second >= 0) gone.push_back(second);
    check_survivors(*comm, *shrunk, gone);
    EXPECT_LT(seconds_since(start), kWellWithinTimeout);
    return 0;
  });
  ASSERT_EQ(exits.size(), static_cast<std::size_t>(world));
  expect_killed_and_the_rest_ok(exits, {victim, second});
}

std::string deaths_name(const ::testing::TestParamInfo<Deaths>& info) {
  const auto [world, victim, second, round, unheard] = info.param;
  std::string name = std::to_string(world) + "ranks_victim" + std::to_string(victim);
  if (second >= 0)
    name += "_rank" + std::to_string(second) +
            (round == 0 ? std::string("_dies_after_deciding")
                        : "_dies_entering_round" + std::to_string(round)) +
            (unheard ? "_unheard" : "");
  return name;
}

INSTANTIATE_TEST_SUITE_P(Worlds, DeathsAroundTheAgreement,
                         ::testing::Values(Deaths(2, 1, -1, 0, false), Deaths(3, 0, -1, 0, false),
                                           Deaths(4, 2, -1, 0, false), Deaths(5, 4, -1, 0, false),
                                           Deaths(8, 3, -1, 0, false), Deaths(4, 1, 2, 1, false),
                                           Deaths(5, 0, 3, 2, false), Deaths(6, 5, 0, 2, false),
                                           Deaths(4, 3, 0, 0, false), Deaths(6, 2, 4, 0, false),
                                           Deaths(5, 0, 3, 2, true), Deaths(3, 2, 0, 2, true)),
                         deaths_name);

// A dead rank's port, held by another process that accepts and never answers (here the rank's
// child, which keeps only its listening sockets), takes the others' connections as a live rank
// would: they find the rank dead by its process instead, long before their deadline.
TEST(Shrink, ARankWhosePortAnotherProcessHoldsIsFoundDeadAtOnce) {
  constexpr int kVictim = 1;
  auto exits = launch(with_kills(3), [&] {
    auto comm = Communicator::from_env();
    if (comm->rank() == kVictim) {
      // One call first: every rank has joined, and the others' failing calls come after.
      std::vector<float> data(1000, 1.0f);
      comm->allreduce(data.data(), data.size(), DataType::f32, ReduceOp::sum);
      if (::fork() == 0) {
        for (int fd = 0; fd < 4096; ++fd) {
          int listening = 0;
          socklen_t length = sizeof listening;
          if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 || !listening)
            ::close(fd);
        }
        ::sleep(30);
        ::_exit(0);
      }
      ::raise(SIGKILL);
    }
    const std::string failure = allreduce_until_failure(*comm, -1, 0);
    const auto start = Clock::now();
    auto shrunk = comm->shrink();
    std::printf("shrunk to %d ranks in %.4f s after: %s\n", shrunk->size(), seconds_since(start),
                failure.c_str());
    check_survivors(*comm, *shrunk, {kVictim});
    EXPECT_LT(seconds_since(start), kWellWithinTimeout);
    return 0;
  });
  ASSERT_EQ(exits.size(), 3u);
  expect_killed_and_the_rest_ok(exits, {kVictim});
}

// Nobody failed: shrink() keeps every rank, as a fresh duplicate.
TEST(Shrink, WithoutAFailureKeepsEveryRank) {
  for (int world : {1, 3}) {
    run_ranks(world, [](Communicator& comm) {
      auto shrunk = comm.shrink();
      check_survivors(comm, *shrunk, {});
    });
  }
}

// Survivors that failed different calls may have changed their settings in between (a
// set_algorithm() before the call one of them never reached): the shrunk communicator takes
// the lowest member's, so its first call runs one algorithm on every rank, not a call
// mismatch.
TEST(Shrink, SurvivorsHoldingDifferentSettingsTakeTheLowestMembers) {
  auto exits = launch(with_kills(3), [&] {
    auto comm = Communicator::from_env();
    comm->set_algorithm("ring");
    const std::string failure = allreduce_until_failure(*comm, 2, 3);
    // Rank 1 had gone on to the next call's setting when it learned of the failure.
    if (comm->rank() == 1) comm->set_algorithm("recursive_doubling");
    auto shrunk = comm->shrink();
    EXPECT_EQ(shrunk->options().algorithm, "ring") << "after: " << failure;
    check_survivors(*comm, *shrunk, {2});
    return 0;
  });
  expect_killed_and_the_rest_ok(exits, {2});
}

// A rank that aborts takes no part: the others find it gone at once, not at their deadline.
TEST(Shrink, ARankThatAbortedIsLeftOutAtOnce) {
  LocalLaunchOptions options;
  options.ranks = 4;
  options.env = {{"ARCOLL_TIMEOUT", kLongTimeout}};
  auto exits = launch(options, [&] {
    auto comm = Communicator::from_env();
    if (comm->rank() == 1) {
      comm->barrier();
      comm->abort("the test gives up");
      std::this_thread::sleep_for(std::chrono::seconds(1));  // alive, but out
      try {
        comm->shrink();
      } catch (const Error& e) {
        std::printf("aborted rank: %s\n", e.what());
        return 0;
      }
      return 3;
    }
    std::vector<float> data(10, 1.0f);
    try {
      comm->barrier();
      comm->allreduce(data.data(), data.size(), DataType::f32, ReduceOp::sum);
      comm->allreduce(data.data(), data.size(), DataType::f32, ReduceOp::sum);
    } catch (const Error&) {
    }
    const auto start = Clock::now();
    auto shrunk = comm->shrink();
    check_survivors(*comm, *shrunk, {1});
    EXPECT_LT(seconds_since(start), kWellWithinTimeout);
    return 0;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
}

// A rank stopped past the deadline is left out; when it comes back, its shrink() says so
// (it is never mixed in), while the others compute on without it.
TEST(Shrink, AStoppedRankThatComesBackFindsItselfLeftOut) {
  LocalLaunchOptions options;
  options.ranks = 4;
  options.env = {{"ARCOLL_TIMEOUT", "2"}};
  options.failure_grace = std::chrono::seconds(60);
  constexpr int kStopped = 2;
  // Marks between the ranks, instead of sleeps: the survivors' rank 0, once every survivor has
  // checked its shrunk communicator, lets the stopped rank go on, and the stopped rank's look
  // lets the survivors end.
  const ScratchFolder folder("arcoll-shrink");
  const std::string survivors_shrunk = folder.path() + "/shrunk",
                    looked = folder.path() + "/looked";
  auto exits = launch(options, [&] {
    auto comm = Communicator::from_env();
    comm->barrier();
    std::vector<float> data(10, 1.0f);
    if (comm->rank() == kStopped) {
      // Stopped for the others' call (2 s) and agreement (2 s), until they have shrunk.
      const pid_t self = ::getpid();
      if (::fork() == 0) {
        came_within(survivors_shrunk.c_str(), 60);
        ::kill(self, SIGCONT);
        ::_exit(0);
      }
      ::raise(SIGSTOP);
      ::wait(nullptr);
      // Its call may fail, or complete where every peer's data had arrived before they gave
      // up (a socket keeps it); either way the shrink that follows leaves it out.
      try {
        comm->allreduce(data.data(), data.size(), DataType::f32, ReduceOp::sum);
      } catch (const Error&) {
      }
      int code = 0;
      try {
        auto shrunk = comm->shrink();
        std::printf("the stopped rank was mixed in: rank %d of %d\n", shrunk->rank(),
                    shrunk->size());
        code = 4;
      } catch (const PeerError& e) {
        std::printf("left out: %s\n", e.what());
        code = std::string(e.what()).find("excluded") != std::string::npos ? 0 : 5;
      }
      mark(looked);
      return code;
    }
    const auto call = Clock::now();
    try {
      comm->allreduce(data.data(), data.size(), DataType::f32, ReduceOp::sum);
      return 6;
    } catch (const Error& e) {
      std::printf("after %.3f s: %s\n", seconds_since(call), e.what());
    }
    auto shrunk = comm->shrink();
    check_survivors(*comm, *shrunk, {kStopped});
    shrunk->barrier();  // every survivor has checked its communicator
    if (shrunk->rank() == 0) mark(survivors_shrunk);
    // Kept alive until the stopped rank has looked: its old peers still listen then.
    return came_within(looked.c_str(), 60) ? 0 : 7;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
}

}  // namespace
}  // namespace arcoll::testing
