// The shared boards of the shm transport (src/core/boards.hpp), through the board all-reduce:
// results at and around their capacity, posts reused across many calls of changing sizes
// between calls that send messages, and a rank that comes late, dies, aborts or is in
// another call: every other rank fails within its deadline naming it, never hangs.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <random>
#include <thread>

#include "arcoll/error.hpp"
#include "src/core/boards.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"
#include "transports/shm/segment.hpp"

namespace arcoll::testing {
namespace {

using Clock = std::chrono::steady_clock;

const std::map<std::string, std::string> kOnBoards = {{"ARCOLL_ALGO", "board"}};

class ShmBoards : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport() != "shm") GTEST_SKIP() << "the shm. run's test";
  }
  static LocalLaunchOptions options(int ranks, const std::string& timeout_s) {
    LocalLaunchOptions o;
    o.ranks = ranks;
    o.env = kOnBoards;
    o.env["ARCOLL_TIMEOUT"] = timeout_s;
    o.failure_grace = std::chrono::seconds(30);
    return o;
  }
};

// The largest part that fits, one element less and one more (which takes another algorithm),
// for every type with sum and f32 with every op, in place and not.
TEST_F(ShmBoards, CountsAroundTheCapacityMatchTheReference) {
  const std::size_t capacity = CallBoards::capacity_of(shm::kBoardBytes);
  for (int world : {2, 3, 5}) {
    run_ranks(
        world,
        [&](Communicator& comm) {
          auto check = [&](DataType type, ReduceOp op) {
            const std::size_t fits = capacity / size_of(type);
            for (std::size_t count : {fits - 1, fits, fits + 1})
              for (bool in_place : {false, true})
                EXPECT_EQ(allreduce_wrong(comm, type, op, count, count, in_place), 0u)
                    << label(type, op, count, in_place);
          };
          for (DataType type : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                                DataType::i32, DataType::i64, DataType::u8})
            check(type, ReduceOp::sum);
          for (ReduceOp op : {ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg})
            check(DataType::f32, op);
        },
        kOnBoards);
  }
}

// Posts alternate between two places and are never acknowledged: many calls of random sizes,
// with broadcasts (messages) between some, must each see only their own parts.
TEST_F(ShmBoards, PostsReusedOverManyCallsOfChangingSizesStayRight) {
  run_ranks(
      4,
      [](Communicator& comm) {
        std::mt19937 shared(7);
        for (int call = 0; call < 400; ++call) {
          const std::size_t count = shared() % 2000;
          auto data = make_input(DataType::i64, ReduceOp::sum, comm.rank(), count, call);
          comm.allreduce(data.data(), count, DataType::i64, ReduceOp::sum);
          ASSERT_EQ(
              count_wrong(data.data(), DataType::i64, ReduceOp::sum, comm.size(), count, call), 0u)
              << "call " << call << ", count " << count;
          if (shared() % 4 == 0) {
            std::int64_t token = comm.rank() == 1 ? call : -1;
            comm.broadcast(&token, 1, DataType::i64, 1);
            ASSERT_EQ(token, call);
          }
        }
      },
      kOnBoards);
}

// A rank late within the deadline is waited for; one later than it is named by the others,
// at the deadline, as the rank whose part is missing.
TEST_F(ShmBoards, ALateRankIsWaitedForThenNamedAtTheDeadline) {
  constexpr int kLate = 1;
  auto exits = launch(options(3, "20"), [&] {
    auto comm = Communicator::from_env();
    return allreduces_with_a_late_rank(*comm, kLate);
  });
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    if (e.rank == kLate) continue;
    EXPECT_NE(e.output.find("allreduce #3"), std::string::npos) << e.output;
    EXPECT_NE(e.output.find("waiting for rank 1 posting its part on the shared boards"), std::string::npos) << e.output;
    const double waited = number_after(e.output, "after ");
    EXPECT_GT(waited, 0.35) << e.output;
    EXPECT_LT(waited, 1.4) << e.output;  // before rank 1 came
  }
}

// A rank killed, or aborting from another thread, while the others wait on the boards: they
// fail promptly (the timeout is 20 s) naming it.
TEST_F(ShmBoards, ARankThatDiesOrAbortsIsNamedPromptly) {
  constexpr int kVictim = 2;
  auto small_allreduces = [](Communicator& comm, int kill_after) {
    std::vector<float> buffer(100, 1.0f);
    for (int i = 0; i < 1000000; ++i) {
      if (comm.rank() == kVictim && i == kill_after) ::raise(SIGKILL);
      const auto start = Clock::now();
      try {
        comm.allreduce(buffer.data(), 1 + i % buffer.size(), DataType::f32, ReduceOp::max);
      } catch (const Error& e) {
        std::printf("detected after %.2f s: %s\n", seconds_since(start), e.what());
        return 0;
      }
    }
    return 3;
  };
  auto killed = launch(options(4, "20"), [&] {
    auto comm = Communicator::from_env();
    return small_allreduces(*comm, 500);
  });
  expect_survivors_named(killed, kVictim, 10.0);

  auto aborted = launch(options(4, "20"), [&] {
    auto comm = Communicator::from_env();
    std::thread watchdog;
    if (comm->rank() == kVictim)
      watchdog = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        comm->abort("the watchdog gave up");
      });
    const int status = small_allreduces(*comm, -1);
    if (watchdog.joinable()) watchdog.join();
    return status;
  });
  for (const auto& e : aborted) {
    EXPECT_TRUE(e.ok()) << describe(aborted);
    EXPECT_NE(e.output.find("the watchdog gave up"), std::string::npos) << e.output;
    if (e.rank == kVictim) continue;
    EXPECT_NE(e.output.find("rank 2 aborted"), std::string::npos) << e.output;
    EXPECT_LT(number_after(e.output, "detected after "), 5.0) << e.output;
  }
}

// A rank that destroys its communicator while the others wait for its part: they fail at once
// (the timeout is 20 s) naming it.
TEST_F(ShmBoards, ARankThatLeavesIsNamedAtOnce) {
  auto exits = launch(options(3, "20"), [&] {
    auto comm = Communicator::from_env();
    comm->barrier();
    if (comm->rank() == 2) return 0;  // destroys its communicator: says goodbye
    std::int64_t value = 1;
    const auto start = Clock::now();
    try {
      comm->allreduce(&value, 1, DataType::i64, ReduceOp::sum);
    } catch (const Error& e) {
      std::printf("after %.3f s: %s\n", seconds_since(start), e.what());
      return 0;
    }
    return 3;
  });
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    if (e.rank == 2) continue;
    EXPECT_NE(e.output.find("rank 2 destroyed its communicator"), std::string::npos) << e.output;
    EXPECT_LT(number_after(e.output, "after "), 5.0) << e.output;
  }
}

// A rank that posts on the boards while the others are in a call that sends messages (and
// then in the next) learns from their boards which call they are in, and names both; the
// others fail through its abort.
TEST_F(ShmBoards, ARankInAnotherCallIsNamedWithBothCalls) {
  auto exits = launch(options(3, "20"), [&] {
    auto comm = Communicator::from_env();
    std::vector<float> buffer(1000, 1.0f);
    const auto start = Clock::now();
    try {
      if (comm->rank() == 2)
        comm->allreduce(buffer.data(), 1, DataType::f32, ReduceOp::sum);
      else
        comm->broadcast(buffer.data(), buffer.size(), DataType::f32, 0);
      comm->barrier();
    } catch (const Error& e) {
      std::printf("after %.3f s: %s\n", seconds_since(start), e.what());
      return 0;
    }
    return 3;
  });
  bool named_both = false;
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    const double failed_after = number_after(e.output, "after ");
    EXPECT_GE(failed_after, 0) << e.output;
    EXPECT_LT(failed_after, 5.0) << e.output;
    // The others may be in the broadcast still, or past it in the barrier.
    const bool names_theirs = e.output.find("broadcast of 1000 f32") != std::string::npos ||
                              e.output.find("went on to call #2") != std::string::npos;
    named_both =
        named_both || (e.output.find("call mismatch") != std::string::npos &&
                       e.output.find("allreduce of 1 f32") != std::string::npos && names_theirs);
  }
  EXPECT_TRUE(named_both) << describe(exits);

  // The same calls in another order: rank 0's broadcast waits for rank 1 to agree on its
  // root, and rank 1's all-reduce finds rank 0 in the broadcast: both fail in call #1, naming
  // both calls (before the root check, rank 0's broadcast ended once sent and the all-reduces
  // met one call apart).
  auto reordered = launch(options(2, "20"), [&] {
    auto comm = Communicator::from_env();
    float value = 1.0f;
    try {
      for (int step = 0; step < 2; ++step) {
        if ((step == 0) == (comm->rank() == 0))
          comm->broadcast(&value, 1, DataType::f32, 0);
        else
          comm->allreduce(&value, 1, DataType::f32, ReduceOp::sum);
      }
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      return 0;
    }
    return 3;
  });
  bool named = false;
  for (const auto& e : reordered) {
    EXPECT_TRUE(e.ok()) << describe(reordered);
    EXPECT_NE(e.output.find(" #1 on rank"), std::string::npos) << e.output;
    named = named || (e.output.find("broadcast of 1 f32") != std::string::npos &&
                      e.output.find("allreduce of 1 f32") != std::string::npos);
  }
  EXPECT_TRUE(named) << describe(reordered);
}

}  // namespace
}  // namespace arcoll::testing
