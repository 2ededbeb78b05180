#include "transports/common/parked.hpp"

#include <algorithm>
#include <mutex>
#include <vector>

namespace arcoll::transport {
namespace {

// A turn of an idle UCX worker over TCP is a system call or two: often enough that an answer
// leaves within moments, rarely enough that a wait on another transport does not pay for it.
constexpr auto kMoveInterval = std::chrono::microseconds(50);

struct Parked {
  std::mutex mutex;
  std::vector<ParkingSpot*> spots;  // under `mutex`
  std::atomic<std::size_t> count{0};
  std::atomic<net::Clock::rep> next_move{0};
};

Parked& parked() {
  static Parked instance;
  return instance;
}

}  // namespace

void ParkingSpot::park() {
  Parked& p = parked();
  std::lock_guard lock(p.mutex);
  p.spots.push_back(this);
  p.count.store(p.spots.size(), std::memory_order_relaxed);
  parked_.store(true, std::memory_order_relaxed);
}

void ParkingSpot::take_back() {
  // Released by move_parked() after its last turn of this transport: nothing of it is left to
  // see once this reads false.
  if (!parked_.load(std::memory_order_acquire)) return;
  Parked& p = parked();
  std::lock_guard lock(p.mutex);
  std::erase(p.spots, this);
  p.count.store(p.spots.size(), std::memory_order_relaxed);
  parked_.store(false, std::memory_order_relaxed);
}

bool ParkingSpot::any_parked() noexcept {
  return parked().count.load(std::memory_order_relaxed) != 0;
}

void ParkingSpot::move_parked(net::Clock::time_point now) {
  Parked& p = parked();
  if (p.count.load(std::memory_order_relaxed) == 0) return;
  const auto ticks = now.time_since_epoch().count();
  if (ticks < p.next_move.load(std::memory_order_relaxed)) return;
  std::unique_lock lock(p.mutex, std::try_to_lock);
  if (!lock.owns_lock()) return;
  p.next_move.store((now + kMoveInterval).time_since_epoch().count(), std::memory_order_relaxed);
  std::erase_if(p.spots, [](ParkingSpot* spot) {
    if (spot->move_()) return false;
    spot->parked_.store(false, std::memory_order_release);
    return true;
  });
  p.count.store(p.spots.size(), std::memory_order_relaxed);
}

}  // namespace arcoll::transport
