// What the cost model assumes of one transport's links: a small message's time, a large one's
// bandwidth, the rate of reduction beside them (tuning.hpp measures and stores them).
#pragma once

namespace arcoll {

struct TransportCosts {
  double latency_us = 0;     // a step of small messages, one each way at once (α)
  double bandwidth_gbs = 0;  // GB/s each way of a large exchange (1/β)
  double reduce_gbs = 0;     // GB/s of reduction, f32 sum out of cache (1/γ)
  // The same of buffers that stay in the caches (measured at kCachedBytes); 0: as out of
  // cache. The model goes from these to the ones above where the buffers leave the host's
  // last-level cache (Tuning::last_level_cache_bytes; without it, from kCachedBytes to
  // kUncachedBytes).
  double cached_bandwidth_gbs = 0;
  double cached_reduce_gbs = 0;
  // GB/s each way of an exchange of kSmallMessageBytes (0: as in cache). A message that fits
  // one of a transport's fragments is copied in whole before its receiver can copy it out,
  // where a large one is copied in and out at once, piece by piece: its bytes cost up to twice
  // as much. The model goes from this to the cached rate between the two sizes.
  double small_bandwidth_gbs = 0;
};

// The buffer sizes the figures above are measured at.
inline constexpr double kCachedBytes = 256 * 1024;
inline constexpr double kUncachedBytes = 16 * 1024 * 1024;
inline constexpr double kSmallMessageBytes = 16 * 1024;

}  // namespace arcoll
