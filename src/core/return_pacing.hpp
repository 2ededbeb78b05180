// Whether a collective paces what it gives by its partner's returns (PointToPoint::
// pace_returns) on buffers that fit the caches. Which way is faster there depends on the
// machine: on 2 ranks of a 2-vCPU AMD EPYC VM, giving every chunk at once took 0.85 of
// pacing's time at 8 MiB; on an Intel Xeon VM, pacing took 0.89-0.92 of the other's at 4-8
// MiB. So each rank times its own calls by size class (powers of two; per byte, as sizes
// within a class differ), one ReturnPacing for each kind of call (a collective, in place or
// not): both ways in turn at first, then the faster by the median of its last few calls,
// with one call in kProbeEvery the other way, so that a change of pace (a VM's vCPUs moved)
// is seen. Ranks may choose differently: both ways send the same messages.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstddef>

namespace arcoll {

class ReturnPacing {
 public:
  // Calls timed each way before the faster one is chosen, and how many are kept.
  static constexpr unsigned kKept = 5;
  // One call in this many of a size class goes the way not chosen (at most a few percent of
  // their time where the ways differ by 10-15%).
  static constexpr unsigned kProbeEvery = 16;

  // Whether the next call of `bytes` paces.
  bool next(std::size_t bytes) {
    SizeClass& c = classes_[std::bit_width(bytes)];
    const Way &paced = c.ways[1], &at_once = c.ways[0];
    if (paced.count < kKept || at_once.count < kKept) return paced.count < at_once.count;
    const bool faster = paced.median() < at_once.median();
    return ++c.calls % kProbeEvery == 0 ? !faster : faster;
  }
  // A call of `bytes` that went `paced` (or not) took `took`.
  void add(std::size_t bytes, bool paced, std::chrono::nanoseconds took) {
    if (took.count() > 0 && bytes > 0)
      classes_[std::bit_width(bytes)].ways[paced ? 1 : 0].add(
          static_cast<double>(took.count()) / static_cast<double>(bytes));
  }

 private:
  struct Way {
    std::array<double, kKept> recent{};  // nanoseconds per byte, the last kKept calls
    unsigned count = 0;
    void add(double ns_per_byte) { recent[count++ % kKept] = ns_per_byte; }
    double median() const {
      std::array<double, kKept> sorted = recent;
      std::nth_element(sorted.begin(), sorted.begin() + kKept / 2, sorted.end());
      return sorted[kKept / 2];
    }
  };
  struct SizeClass {
    std::array<Way, 2> ways;  // given at once, paced
    unsigned calls = 0;
  };
  std::array<SizeClass, 65> classes_{};
};

}  // namespace arcoll
