#include "arbench/backends/hang_watch.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace arbench {

// Looked at this often, so that a stalled call ends within a tenth of the timeout of it.
constexpr std::chrono::milliseconds kMaxLookInterval{200};
// A call may take the timeout and a second per this many bytes it moves: a large call over a
// slow link (4 GiB at 1 Gbit/s takes a minute) is slow, not stalled.
constexpr double kSlowestBytesPerSecond = 10e6;

HangWatch::HangWatch(std::string library, const arcoll::Communicator& comm)
    : library_(std::move(library)),
      rank_(comm.rank()),
      timeout_(std::chrono::duration_cast<std::chrono::milliseconds>(comm.options().timeout)) {
  thread_ = std::thread([this] { watch(); });
}

HangWatch::~HangWatch() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_one();
  thread_.join();
}

void HangWatch::watch() {
  using Clock = std::chrono::steady_clock;
  const auto interval = std::clamp(timeout_ / 10, std::chrono::milliseconds(1), kMaxLookInterval);
  std::uint64_t seen = 0;
  Clock::time_point since = Clock::now();
  std::unique_lock lock(mutex_);
  while (!stop_.wait_for(lock, interval, [this] { return stopping_; })) {
    const std::uint64_t calls = calls_.load(std::memory_order_acquire);
    const auto now = Clock::now();
    if (calls != seen || calls % 2 == 0) {
      seen = calls;
      since = now;
      continue;
    }
    const std::size_t bytes = bytes_.load(std::memory_order_relaxed);
    const double seconds = std::chrono::duration<double>(now - since).count();
    const double limit = std::chrono::duration<double>(timeout_).count() +
                         static_cast<double>(bytes) / kSlowestBytesPerSecond;
    if (seconds < limit) continue;
    std::fprintf(stderr,
                 "arbench: rank %d: %s of %zu B has not returned after %.1f s (%s calls have no "
                 "deadline of their own: ARCOLL_TIMEOUT's, and a second per 10 MB moved): "
                 "ending the run\n",
                 rank_, function_.load(std::memory_order_relaxed), bytes, seconds,
                 library_.c_str());
    std::fflush(stderr);
    ::_exit(1);
  }
}

}  // namespace arbench
