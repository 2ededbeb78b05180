// A parameter server over a communicator's ranks: tensors registered by key, cut into pieces
// (4 MiB by default, as BytePS) spread over the servers balanced by bytes; workers push
// gradients and pull values, or push_pull in one call; servers sum what is pushed (a summation
// service: workers run their own optimizer) or apply SGD with momentum themselves (the classic
// parameter server workers pull weights from).
//
// Servers are dedicated ranks (they call serve() until every worker has finished) or colocated
// with every worker (a server thread in each process serves a share of the pieces). The
// parameter server talks over a communicator of its own (Communicator::duplicate), so it never
// meets the caller's collectives.
//
// Consistency, per key, counting each worker's pushes of the key as its clock:
//   bsp     a pull after a worker's t-th push returns the sum of every worker's t-th push (sgd:
//           the weights after step t's update): synchronous data parallelism, all-reduce's result;
//   asp     each push is applied when it arrives; a pull returns the value as it is;
//   ssp(k)  as asp, but a pull at clock t waits until every worker has pushed at least t - k
//           times: no worker runs more than k clocks ahead of the slowest.
// Every wait has the communicator's deadline; a worker or server that dies or hangs fails the
// others' calls naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/types.hpp"
#include "arcoll/work.hpp"

namespace arcoll {

enum class Consistency { bsp, asp, ssp };
enum class ServerRule {
  sum,  // the servers hold the sum of what was pushed (bsp: of each step)
  sgd,  // the servers hold weights, stepped by SGD with momentum on what was pushed (f32)
};

struct ParameterServerOptions {
  // Ranks that only serve; empty: every rank is a worker and serves a share (colocated).
  std::vector<int> server_ranks;
  std::size_t piece_bytes = 4u << 20;
  Consistency consistency = Consistency::bsp;
  int staleness = 0;  // ssp's k
  ServerRule rule = ServerRule::sum;
  // sgd: w -= learning_rate * v, v = momentum * v + g, with g the mean of a step's pushes
  // (bsp) or one worker's push (asp, ssp).
  double learning_rate = 0.01;
  double momentum = 0.0;
};

class ParameterServer {
 public:
  // Collective over `comm`'s ranks (every one calls it with the same options). `comm` may be
  // used for other calls meanwhile; it must outlive nothing here.
  ParameterServer(Communicator& comm, const ParameterServerOptions& options);
  // A worker that has not finished finishes, and a colocated server serves until every worker
  // has; then the parameter server's thread stops.
  ~ParameterServer();
  ParameterServer(const ParameterServer&) = delete;
  ParameterServer& operator=(const ParameterServer&) = delete;

  bool is_worker() const;
  int worker_count() const;
  int worker_index() const;  // 0 .. worker_count() - 1 on workers, -1 on dedicated servers
  const std::vector<int>& server_ranks() const;  // every rank when colocated

  // Dedicated servers: serve until every worker has finished; throws when the job fails (a
  // worker died, hung past the deadline, or broke the protocol).
  void serve();

  // Workers: every worker registers the same keys with the same counts and types, in the same
  // order, before it pushes or pulls them. Blocks until the servers hold the key. `initial`
  // (worker 0's; null: zeros) is where the values start (asp and ssp with sum; sgd's weights).
  void register_tensor(std::uint64_t key, std::size_t count, DataType type,
                       const void* initial = nullptr);
  // Buffers hold the key's registered count of elements and stay untouched until the Work
  // completes.
  WorkPtr ipush(std::uint64_t key, const void* data);
  WorkPtr ipull(std::uint64_t key, void* data);
  WorkPtr ipush_pull(std::uint64_t key, const void* send, void* recv);
  void push(std::uint64_t key, const void* data) { ipush(key, data)->wait(); }
  void pull(std::uint64_t key, void* data) { ipull(key, data)->wait(); }
  void push_pull(std::uint64_t key, const void* send, void* recv) {
    ipush_pull(key, send, recv)->wait();
  }
  // Every worker's pushes issued before it have been applied on every server once it returns
  // on any worker (a barrier among workers, through the servers).
  void barrier();
  // This worker is done; dedicated servers stop once every worker is.
  void finish();

  // Where each piece of `key` is served: (server rank, first element, elements), in order.
  struct Piece {
    int server = 0;
    std::size_t offset = 0;
    std::size_t count = 0;
  };
  std::vector<Piece> pieces(std::uint64_t key) const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace arcoll
