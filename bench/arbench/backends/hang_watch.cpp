#include "arbench/backends/hang_watch.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace arbench {

// Looked at this often, so that a stalled call ends within a tenth of the timeout of it.
constexpr std::chrono::milliseconds kMaxLookInterval{200};

HangWatch::HangWatch(std::string library, int rank, std::chrono::milliseconds timeout)
    : library_(std::move(library)), rank_(rank), timeout_(timeout) {
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
    if (now - since < timeout_) continue;
    const double seconds = std::chrono::duration<double>(now - since).count();
    std::fprintf(stderr,
                 "arbench: rank %d: %s of %zu B has not returned after %.1f s (%s calls have no "
                 "deadline of their own; ARCOLL_TIMEOUT sets this one): ending the run\n",
                 rank_, function_.load(std::memory_order_relaxed),
                 bytes_.load(std::memory_order_relaxed), seconds, library_.c_str());
    std::fflush(stderr);
    ::_exit(1);
  }
}

}  // namespace arbench
