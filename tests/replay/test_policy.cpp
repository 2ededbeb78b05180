// How each framework policy groups a model's gradients into all-reduces.
#include <gtest/gtest.h>

#include <stdexcept>

#include "replay/policy.hpp"

namespace arcoll::replay {
namespace {

std::vector<double> even_backward(const Model& model, double seconds_per_layer) {
  return std::vector<double>(model.layers.size(), seconds_per_layer);
}

// Every gradient tensor in exactly one bucket, in gradient order; buckets start in order.
void expect_covers_in_order(const Model& model, const std::vector<Bucket>& buckets) {
  std::size_t next = 0, elements = 0, ready = 0;
  for (const Bucket& b : buckets) {
    EXPECT_FALSE(b.tensors.empty());
    EXPECT_GE(b.ready_after, ready);
    ready = b.ready_after;
    for (std::size_t t : b.tensors) EXPECT_EQ(t, next++);
    elements += b.elements;
  }
  EXPECT_EQ(next, model.tensor_count());
  EXPECT_EQ(static_cast<std::int64_t>(elements), model.parameter_count());
}

TEST(Policies, BucketsFollowDdpCapsAndCoverEveryGradientOnce) {
  const Model model = build_model("resnet50");
  const Policy policy = parse_policy("buckets");
  const auto buckets = plan_buckets(model, policy, even_backward(model, 1e-3));
  expect_covers_in_order(model, buckets);
  // The first bucket closes at 1 MiB, the others at 25 MiB; a bucket passes its cap by at most
  // its last tensor.
  ASSERT_GE(buckets.size(), 3u);
  EXPECT_GE(buckets[0].elements * 4, policy.first_bucket_bytes);
  EXPECT_LT(buckets[0].elements * 4, policy.first_bucket_bytes + (16u << 20));
  for (std::size_t i = 1; i + 1 < buckets.size(); ++i)
    EXPECT_GE(buckets[i].elements * 4, policy.bucket_bytes) << "bucket " << i;
}

TEST(Policies, WfbpSendsEachLayerAndSyncSendsOnceAtTheEnd) {
  const Model model = build_model("alexnet");
  const auto wfbp = plan_buckets(model, parse_policy("wfbp"), even_backward(model, 1e-3));
  expect_covers_in_order(model, wfbp);
  EXPECT_EQ(wfbp.size(), 8u);  // 5 convolutions and 3 fully connected layers
  const auto sync =
      plan_buckets(model, parse_policy("sync-after-backward"), even_backward(model, 1e-3));
  expect_covers_in_order(model, sync);
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(sync[0].ready_after, model.layers.size() - 1);
}

TEST(Policies, FusionJoinsWhatBecomesReadyInOneCycleUpToTheThreshold) {
  const Model model = build_model("resnet50");
  Policy fusion = parse_policy("fusion");
  // All layers within one cycle: only the threshold splits.
  const auto one_cycle = plan_buckets(model, fusion, even_backward(model, 1e-6));
  expect_covers_in_order(model, one_cycle);
  EXPECT_EQ(one_cycle.size(), 1u);  // 97.5 MiB < 128 MiB
  fusion.fusion_bytes = 16u << 20;
  const auto capped = plan_buckets(model, fusion, even_backward(model, 1e-6));
  expect_covers_in_order(model, capped);
  for (const Bucket& b : capped) EXPECT_LE(b.elements * 4, fusion.fusion_bytes);
  // A cycle per layer: every layer with gradients is its own all-reduce.
  fusion.fusion_bytes = 128u << 20;
  const auto slow = plan_buckets(model, fusion, even_backward(model, 2e-3));
  expect_covers_in_order(model, slow);
  EXPECT_EQ(slow.size(), plan_buckets(model, parse_policy("wfbp"), {}).size());
}

// MXNet's kvstore keeps a key per layer: the parameter server's push_pulls are wfbp's buckets.
TEST(Policies, ParameterServerPushesALayerAtATimeAndNamesAreChecked) {
  const Model model = build_model("alexnet");
  const auto ps = plan_buckets(model, parse_policy("ps"), {});
  expect_covers_in_order(model, ps);
  const auto wfbp = plan_buckets(model, parse_policy("wfbp"), {});
  ASSERT_EQ(ps.size(), wfbp.size());
  for (std::size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(ps[i].tensors, wfbp[i].tensors);
    EXPECT_EQ(ps[i].ready_after, wfbp[i].ready_after);
  }
  EXPECT_THROW(parse_policy("allreduce-later"), std::invalid_argument);
}

}  // namespace
}  // namespace arcoll::replay
