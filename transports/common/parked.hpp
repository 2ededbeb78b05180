// Transports that a rank left between calls with work that only moving them finishes. A UCX
// worker over TCP answers its peers (the flush after a large send, a rendezvous's
// acknowledgement) only as it moves, and a rank may go on to another communicator's calls while
// a peer still waits in this one for such an answer, which it then waited for in vain while
// that peer waited for it in the other call. So, as Open MPI's progress loop moves every
// module of the process in any wait, every blocking wait of any communicator in this process
// moves the parked transports now and then.
//
// A parked transport belongs to the process's waits until its owner takes it back, which it
// does before touching it again: one thread moves it at a time.
#pragma once

#include <atomic>
#include <functional>

#include "src/base/socket.hpp"

namespace arcoll::transport {

class ParkingSpot {
 public:
  // `move`: one turn that never blocks; whether the transport still has work for the waits.
  explicit ParkingSpot(std::function<bool()> move) : move_(std::move(move)) {}
  ParkingSpot(const ParkingSpot&) = delete;
  ParkingSpot& operator=(const ParkingSpot&) = delete;
  ~ParkingSpot() { take_back(); }

  // By the owner, leaving a call.
  void park();
  // By the owner, before it touches the transport again; cheap when not parked.
  void take_back();

  // Any thread that waits in a call: one turn of each parked transport (at most every few tens
  // of microseconds, and skipped while another thread is at it). Cheap when none is parked.
  static void move_parked(net::Clock::time_point now);
  static bool any_parked() noexcept;

 private:
  std::function<bool()> move_;
  std::atomic<bool> parked_{false};
};

}  // namespace arcoll::transport
