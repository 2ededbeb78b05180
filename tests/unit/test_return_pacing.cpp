// ReturnPacing: both ways in turn at first, then the one timed faster, with probes the other
// way that let a change of pace turn the choice; size classes apart.
#include "src/core/return_pacing.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace arcoll {
namespace {

using std::chrono::microseconds;
constexpr std::size_t k4MiB = std::size_t{4} << 20;

// Runs `calls` calls of `bytes`, each taking `paced_us` or `at_once_us` by its way; returns
// how many paced.
int run(ReturnPacing& pacing, std::size_t bytes, int calls, int paced_us, int at_once_us) {
  int paced = 0;
  for (int i = 0; i < calls; ++i) {
    const bool p = pacing.next(bytes);
    paced += p;
    pacing.add(bytes, p, microseconds(p ? paced_us : at_once_us));
  }
  return paced;
}

TEST(ReturnPacing, TimesBothWaysInTurnFirst) {
  ReturnPacing pacing;
  bool last = true;
  for (unsigned i = 0; i < 2 * ReturnPacing::kKept; ++i) {
    const bool p = pacing.next(k4MiB);
    EXPECT_NE(p, last) << "call " << i;
    last = p;
    pacing.add(k4MiB, p, microseconds(500));
  }
}

TEST(ReturnPacing, ChoosesTheFasterWayAndProbesTheOther) {
  ReturnPacing faster_paced, faster_at_once;
  run(faster_paced, k4MiB, 2 * ReturnPacing::kKept, 520, 580);
  run(faster_at_once, k4MiB, 2 * ReturnPacing::kKept, 580, 520);
  const int calls = 20 * ReturnPacing::kProbeEvery;
  const int probes = calls / ReturnPacing::kProbeEvery;
  EXPECT_EQ(run(faster_paced, k4MiB, calls, 520, 580), calls - probes);
  EXPECT_EQ(run(faster_at_once, k4MiB, calls, 580, 520), probes);
}

TEST(ReturnPacing, AChangeOfPaceTurnsTheChoice) {
  ReturnPacing pacing;
  run(pacing, k4MiB, 4 * ReturnPacing::kProbeEvery, 520, 580);  // paced faster
  // Now giving at once is: the probes bring its times in, and the choice turns.
  run(pacing, k4MiB, 4 * ReturnPacing::kProbeEvery, 580, 520);
  const int calls = 4 * ReturnPacing::kProbeEvery;
  EXPECT_EQ(run(pacing, k4MiB, calls, 580, 520), calls / ReturnPacing::kProbeEvery);
}

TEST(ReturnPacing, OneTimeOutOfLineDoesNotTurnIt) {
  ReturnPacing pacing;
  run(pacing, k4MiB, 4 * ReturnPacing::kProbeEvery, 520, 580);
  // One paced call preempted for 10 ms: the median of the kept calls stands.
  pacing.add(k4MiB, true, microseconds(10000));
  const int calls = 4 * ReturnPacing::kProbeEvery;
  EXPECT_EQ(run(pacing, k4MiB, calls, 520, 580), calls - calls / ReturnPacing::kProbeEvery);
}

TEST(ReturnPacing, SizeClassesChooseApart) {
  ReturnPacing pacing;
  const std::size_t k1MiB = std::size_t{1} << 20;
  const int calls = 10 * ReturnPacing::kProbeEvery;
  run(pacing, k4MiB, calls, 520, 580);
  run(pacing, k1MiB, calls, 150, 120);
  // 4 MiB and 4 MiB + 1 B (one class): paced; 1 MiB: at once.
  EXPECT_EQ(run(pacing, k4MiB + 1, calls, 520, 580), calls - calls / ReturnPacing::kProbeEvery);
  EXPECT_EQ(run(pacing, k1MiB, calls, 150, 120), calls / ReturnPacing::kProbeEvery);
}

}  // namespace
}  // namespace arcoll
