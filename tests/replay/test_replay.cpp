// The replay over real ranks: every policy's all-reduces run, in its order, no earlier than
// their gradients are ready, and the iteration's time accounts for compute and what
// communication did not hide.
#include <gtest/gtest.h>

#include "replay/replay.hpp"
#include "tests/support/ranks.hpp"

namespace arcoll::replay {
namespace {

class ReplayPolicies : public ::testing::TestWithParam<std::string> {};

TEST_P(ReplayPolicies, AllReducesStartWhenReadyAndTimesAddUp) {
  arcoll::testing::run_ranks(4, [](Communicator& comm) {
    ReplayConfig config;
    config.model = build_model("googlenet");
    config.batch = 2;
    config.device = device_profile("v100");
    config.policy = parse_policy(GetParam());
    config.iterations = 3;
    config.warmup = 1;
    const ReplayResult result = run_replay(comm, config);
    ASSERT_EQ(result.iterations.size(), 3u);
    for (const IterationRecord& it : result.iterations) {
      ASSERT_EQ(it.buckets.size(), result.plan.size());
      EXPECT_GE(it.backward_end, it.compute * 0.99);  // slept at least the modelled time
      EXPECT_GE(it.total, it.backward_end);
      double previous_end = 0;
      for (const BucketSpan& b : it.buckets) {
        EXPECT_GE(b.start, b.ready);       // not before its gradients exist
        EXPECT_GE(b.start, previous_end);  // one after the other, in the policy's order
        EXPECT_GE(b.end, b.start);
        previous_end = b.end;
      }
      // The iteration ends after backward and after its last all-reduce (how long after is
      // the scheduler's business on a loaded machine, not a property of the replay).
      EXPECT_GE(it.total, std::max(it.backward_end, previous_end));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Policies, ReplayPolicies,
                         ::testing::Values("sync-after-backward", "wfbp", "buckets", "fusion"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace arcoll::replay
