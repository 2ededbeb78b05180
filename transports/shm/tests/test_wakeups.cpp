// Waits that sleep are woken by every message and every post on the boards. Writers that joined
// the remote barriers (segment.hpp) look whether their peer sleeps with no fence of their own;
// the sleeper's barrier stands in for it. A wake missed costs the sleeper the rest of its sleep
// (up to the engine's slice, 5 ms, where a wake takes microseconds). A rank that never rings
// its sleeping peer fails it; a wake lost in the rare race the barrier closes would not.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/support/ranks.hpp"

namespace arcoll::testing {
namespace {

using Clock = std::chrono::steady_clock;

class ShmWakeups : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport() != "shm") GTEST_SKIP() << "the shm. run's test";
  }
};

// Every wait sleeps at once (no polling first), and each rank in turn keeps the other waiting
// for a millisecond before it sends or posts: a ping-pong of messages, then an all-reduce on the
// boards, each round. A round takes those 3 ms and its wakes.
TEST_F(ShmWakeups, EveryMessageAndPostWakesASleepingPeer) {
  run_ranks(2,
            [](Communicator& comm) {
              constexpr int kRounds = 150;
              constexpr auto kHold = std::chrono::milliseconds(1);
              int slow = 0;
              for (int round = 0; round < kRounds; ++round) {
                const auto start = Clock::now();
                std::int32_t value = comm.rank() == 0 ? round : -1;
                if (comm.rank() == 0) {
                  std::this_thread::sleep_for(kHold);
                  comm.send(&value, sizeof value, 1);
                  comm.recv(&value, sizeof value, 1);
                  EXPECT_EQ(value, round + 1) << "round " << round;
                } else {
                  comm.recv(&value, sizeof value, 0);
                  EXPECT_EQ(value, round) << "round " << round;
                  ++value;
                  std::this_thread::sleep_for(kHold);
                  comm.send(&value, sizeof value, 0);
                }
                if (comm.rank() == round % 2) std::this_thread::sleep_for(kHold);
                float sum = static_cast<float>(comm.rank() + round);
                comm.allreduce(&sum, 1, DataType::f32, ReduceOp::sum);
                EXPECT_EQ(sum, static_cast<float>(1 + 2 * round)) << "round " << round;
                slow += Clock::now() - start > 3 * kHold + std::chrono::milliseconds(3);
              }
              // A loaded machine (sanitizers, tests beside) may hold a rank off its core now and
              // then; a peer never woken would hold every round.
              EXPECT_LE(slow, kRounds / 3) << "rounds that took over 6 ms";
            },
            {{"ARCOLL_BUSY_POLL_US", "0"}, {"ARCOLL_ALGO", "board"}});
}

}  // namespace
}  // namespace arcoll::testing
