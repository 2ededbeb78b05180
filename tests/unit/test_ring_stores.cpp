// The shm transport's choice of stores for its larger fragments into a peer's ring: cached
// until cached copies are timed slower than 6 GB/s, then streaming ones but for one fragment in
// 64, written cached and timed; the pace smoothed, preempted copies and streamed ones no pace;
// or either way always, as Options::shm_ring_stores says.
#include <gtest/gtest.h>

#include <chrono>

#include "transports/shm/ring_stores.hpp"

namespace arcoll::shm {
namespace {

using std::chrono::nanoseconds;
using kernels::Stores;

constexpr std::size_t kBytes = 64000;  // divides evenly by the paces below

// How many of `n` fragments the stores would stream, each cached one timed at `gbs`.
int streamed_of(RingStores& stores, int n, double gbs) {
  int streamed = 0;
  for (int i = 0; i < n; ++i) {
    const Stores s = stores.next();
    if (s == Stores::streaming) ++streamed;
    stores.add(s, kBytes, nanoseconds(static_cast<long>(kBytes / gbs)));
  }
  return streamed;
}

TEST(RingStores, CachedUntilTimed) {
  RingStores stores;
  EXPECT_EQ(stores.cached_pace(), 0.0);
  EXPECT_EQ(stores.next(), Stores::by_size);
  EXPECT_FALSE(stores.streaming());
}

TEST(RingStores, FastCopiesStayCached) {
  RingStores stores;
  EXPECT_EQ(streamed_of(stores, 200, 20.0), 0);
  EXPECT_DOUBLE_EQ(stores.cached_pace(), 20.0);
}

TEST(RingStores, SlowCopiesStreamAllButOneFragmentIn64) {
  RingStores stores;
  stores.add(Stores::by_size, kBytes, nanoseconds(kBytes * 10 / 25));  // 2.5 GB/s
  EXPECT_TRUE(stores.streaming());
  EXPECT_EQ(streamed_of(stores, 128, 2.5), 126);
}

TEST(RingStores, APlacementChangeIsSeenByTheProbesBothWays) {
  RingStores stores;
  EXPECT_EQ(streamed_of(stores, 20, 2.5), 19);  // slow from the first copy on
  // The cores come near again: the next probe, written cached, brings the pace above 6 GB/s.
  EXPECT_LT(streamed_of(stores, 64, 40.0), 64);
  EXPECT_FALSE(stores.streaming());
  EXPECT_EQ(streamed_of(stores, 64, 40.0), 0);
  // And far again: a few cached fragments bring it below.
  EXPECT_LT(streamed_of(stores, 12, 2.5), 12);
  EXPECT_TRUE(stores.streaming());
}

TEST(RingStores, StreamedAndPreemptedCopiesAreNoPace) {
  RingStores stores;
  stores.add(Stores::by_size, kBytes, nanoseconds(kBytes / 20));
  stores.add(Stores::streaming, kBytes, nanoseconds(kBytes));  // 1 GB/s, but streamed
  stores.add(Stores::by_size, kBytes, std::chrono::milliseconds(3));  // lost its core meanwhile
  stores.add(Stores::by_size, kBytes, nanoseconds(0));
  EXPECT_DOUBLE_EQ(stores.cached_pace(), 20.0);
}

TEST(RingStores, AFixedWayIsKeptWhateverThePace) {
  RingStores cached(ShmRingStores::cached), streamed(ShmRingStores::streaming);
  EXPECT_EQ(streamed_of(cached, 100, 2.5), 0);
  EXPECT_FALSE(cached.streaming());
  EXPECT_EQ(streamed_of(streamed, 100, 40.0), 100);
  EXPECT_TRUE(streamed.streaming());
}

}  // namespace
}  // namespace arcoll::shm
