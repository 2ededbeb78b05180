// What the cost model assumes of one transport's links: a small message's time, a large one's
// bandwidth, the rate of reduction beside them (tuning.hpp measures and stores them).
#pragma once

namespace arcoll {

struct TransportCosts {
  double latency_us = 0;     // one small message, one way (α)
  double bandwidth_gbs = 0;  // GB/s each way of a large exchange (1/β)
  double reduce_gbs = 0;     // GB/s of reduction, f32 sum out of cache (1/γ)
};

}  // namespace arcoll
