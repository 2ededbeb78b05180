// Which stores a rank writes its larger fragments into one peer's ring with. Where the peer's
// core is near, the ring's lines come back from its cache at once and cached stores win. Where
// it is far (a VM whose vCPUs the host places on distant dies for a while; ranks on two dies
// or sockets), every line the peer has read must be taken back from it one by one: on a
// 2-vCPU AMD EPYC VM, copies into the ring fell from 14-43 GB/s to 2.5 GB/s while a cache
// line's round trip between the cores went from 57 ns to 320-345 ns. Streaming stores write
// whole lines without taking them back: 2-rank all-reduce of 2 MiB went from 2.1 to 11 GB/s
// busbw in that placement, but from 14-18 to 6.8-7.9 in the near one, where the peer then
// reads the lines from memory. So fragments are streamed while cached copies run slower than
// kSlowBytesPerNs; one in kProbeEvery is then still written cached and timed, so that the
// rank sees the host move the vCPUs back. (The writer's own time cannot choose between the
// two ways: a streamed copy ends before the peer pays for reading it from memory.)
// Options::shm_ring_stores may also fix either way. Pieces a receive reduces and forwards as
// they land (shm_receive.cpp) follow the choice, but are not timed: a reduction's pace is not
// a copy's.
#pragma once

#include <chrono>
#include <cstddef>

#include "arcoll/options.hpp"
#include "src/base/reduce.hpp"

namespace arcoll::shm {

class RingStores {
 public:
  explicit RingStores(ShmRingStores mode = ShmRingStores::automatic) : mode_(mode) {}

  // Fragments of at least this many bytes are timed and may be streamed; smaller ones are
  // cached (too short to time, and a small message's lines are read back at once).
  static constexpr std::size_t kTimedBytes = 16 * 1024;

  // The stores for the next fragment of at least kTimedBytes.
  kernels::Stores next() {
    if (!streaming()) return kernels::Stores::by_size;
    const bool probe = mode_ == ShmRingStores::automatic && ++streamed_ % kProbeEvery == 0;
    return probe ? kernels::Stores::by_size : kernels::Stores::streaming;
  }
  // A fragment of `bytes` written with `stores` in `took`.
  void add(kernels::Stores stores, std::size_t bytes, std::chrono::nanoseconds took) {
    // Only cached copies are the pace; one this long was preempted (64 KiB take 26 us at 2.5
    // GB/s).
    if (stores != kernels::Stores::by_size || took.count() <= 0 || took > kPreempted) return;
    const double sample = static_cast<double>(bytes) / static_cast<double>(took.count());
    cached_ = cached_ == 0 ? sample : 0.75 * cached_ + 0.25 * sample;
  }
  // Smoothed GB/s of cached copies (0: none timed yet).
  double cached_pace() const { return cached_; }
  // Whether larger fragments are streamed now.
  bool streaming() const {
    return mode_ == ShmRingStores::streaming ||
           (mode_ == ShmRingStores::automatic && cached_ > 0 && cached_ < kSlowBytesPerNs);
  }
  // Whether streaming() held at the last settle(), which the transport calls between calls:
  // what a choice that must hold for a whole call goes by (shared buffers read in place).
  bool far() const { return far_; }
  void settle() { far_ = streaming(); }

  // A probe of 64 KiB takes about 26 us where cached copies run at 2.5 GB/s, a streamed
  // fragment 2-3 us (the writer's own time, 26-30 GB/s): one in 64 costs a few percent there
  // (estimated from those paces, not measured apart), and a placement change is seen within a
  // millisecond of copying.
  static constexpr unsigned kProbeEvery = 64;

 private:
  static constexpr double kSlowBytesPerNs = 6.0;
  static constexpr std::chrono::microseconds kPreempted{200};
  ShmRingStores mode_;
  double cached_ = 0;
  unsigned streamed_ = 0;
  bool far_ = false;
};

}  // namespace arcoll::shm
