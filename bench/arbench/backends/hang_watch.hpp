// Calls into a peer library that has no deadline of its own (MPI: a peer that stops, or a
// transport that stalls, leaves MPI waiting forever) are watched by a thread: one that has not
// returned within the timeout ends the rank with a message naming the call and the rank, and
// the launcher (mpirun) then ends the others, where the run would otherwise hang.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "arcoll/communicator.hpp"

namespace arbench {

class HangWatch {
 public:
  // `library` names the calls' library in the message ("MPI"); the rank and the timeout are
  // `comm`'s.
  HangWatch(std::string library, const arcoll::Communicator& comm);
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // Watches a call (`function`: a string literal) from now to the end of the caller's scope,
  // also when the call throws; from one thread, at the cost of four plain stores (no locked
  // instruction): the timed loops run through here.
  struct Scope {
    HangWatch& watch;
    ~Scope() { watch.count_call(); }
  };
  [[nodiscard]] Scope watching(const char* function, std::size_t bytes) noexcept {
    function_.store(function, std::memory_order_relaxed);
    bytes_.store(bytes, std::memory_order_relaxed);
    count_call();
    return Scope{*this};
  }

 private:
  void count_call() noexcept {
    calls_.store(calls_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  void watch();

  const std::string library_;
  const int rank_;
  const std::chrono::milliseconds timeout_;
  // Entries and exits so far: odd while a call is under way.
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<const char*> function_{""};
  std::atomic<std::size_t> bytes_{0};
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace arbench
