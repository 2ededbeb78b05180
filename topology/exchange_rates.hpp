// How measure_tuning turns an exchange's time into a bandwidth (a header of its own so that
// the rule is tested).
#pragma once

#include <algorithm>
#include <cstddef>

namespace arcoll {

// GB/s of an exchange of `bytes` each way that took `seconds`, of which `alpha` is what any
// message costs. At least half of the time counts as moving the bytes: on a noisy host α can
// come out near a whole exchange's time, and the rate would then be boundless (kept in the
// cache, such a figure made the model take exchanges in cache for free).
inline double exchange_gbs(std::size_t bytes, double seconds, double alpha) {
  return static_cast<double>(bytes) / std::max(seconds - alpha, seconds / 2) / 1e9;
}

}  // namespace arcoll
