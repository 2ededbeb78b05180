// The default of how transports' waits poll before they sleep (transport.hpp's Polling).
#include "transports/transport.hpp"

namespace arcoll {

Polling Polling::for_host(std::chrono::microseconds configured, bool oversubscribed) {
  using std::chrono::microseconds;
  if (configured.count() >= 0) return {configured, configured, false};
  // With more ranks than cores, poll but yield the core between polls: the peer being waited
  // for is likely the one that needs it, and gets it at once instead of after a sleep and a
  // wake-up.
  if (oversubscribed) return {microseconds(1000), microseconds(1000), true};
  // With a core per rank, a thread that has nothing else to do spins for a millisecond before
  // it sleeps, as MPI's progress spins: sleeping through waits of that order (a peer copying a
  // few MiB) cost more than spinning. 2 ranks on 2 cores of an Intel Xeon VM, busbw against
  // Open MPI in the same runs (arbench --coll all --compare mpi), 50 us -> 1 ms: gather 2 /
  // 8 MiB x0.80-0.84 / x0.90-0.92 -> x0.99-1.00, broadcast 2 MiB x0.97-1.03 -> x1.13-1.17;
  // over UCX, broadcast 4 MiB x0.89 -> x0.97-1.00 and gather 4 MiB x0.79-0.82 -> x0.95-1.00.
  // A queue's progress thread (Waiting::poll_briefly) spins 50 us only: it runs calls for
  // callers whose threads (torch's backward pass) want the cores meanwhile.
  return {microseconds(1000), microseconds(50), false};
}

}  // namespace arcoll
