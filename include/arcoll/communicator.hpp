// The communicator: a group of ranks that run collectives together.
//
// A communicator is used by one thread at a time; every rank calls the same collectives in
// the same order (as with NCCL and MPI). Every call honours Options::timeout and throws an
// arcoll::Error naming the operation and the ranks involved instead of hanging.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "arcoll/launch.hpp"
#include "arcoll/options.hpp"
#include "arcoll/types.hpp"

namespace arcoll {

// What the cost model predicts for one all-reduce.
struct Tuning;

struct AllreducePrediction {
  std::string algorithm;
  std::size_t chunk_bytes = 0;  // the pipeline chunk it would run with
  double seconds = 0;
};

class Communicator {
 public:
  // Joins the job described by `launch` (rendezvous through rank 0's store).
  Communicator(const LaunchInfo& launch, const Options& options);
  // Joins the job described by the environment: detect_launch() and Options::from_env().
  static std::unique_ptr<Communicator> from_env();

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;  // rank among the ranks of this host
  int local_size() const;
  int node_id() const;  // index of this host in the job (hosts numbered by lowest rank)
  int node_count() const;
  const std::string& node_name() const;  // hostname, or ARCOLL_NODE_ID when set
  const Options& options() const;
  // Name of the transport(s) and of the all-reduce algorithm in use ("shm+tcp", "ring", or
  // which sizes take which under "auto").
  std::string transport_name() const;
  std::string algorithm_name() const;
  // The transport that carries messages to `peer` ("shm", "tcp"; "self" for this rank).
  std::string transport_to(int peer) const;

  // All-reduce algorithms this library has (the choices of Options::algorithm besides "auto").
  static std::vector<std::string> allreduce_algorithms();
  // Changes the algorithm of the collectives that follow ("auto" or a name); every rank must
  // make the same change between the same calls.
  void set_algorithm(const std::string& name);
  // The cost model's prediction for an all-reduce of `bytes` on this communicator with
  // `algorithm`, or with the one "auto" chooses.
  AllreducePrediction predict_allreduce(std::size_t bytes,
                                        const std::string& algorithm = "auto") const;

  // Mixed precision for the collectives that follow: f32 data reduced travels as f16 or bf16
  // (f32: as it is), as Options::wire; every rank must make the same change.
  void set_wire(DataType wire);
  // The link costs that auto's cost model and predict_allreduce use from now on, as from
  // Options::tuning_file; every rank must pass the same figures (measure_tuning() returns the
  // same on all), or auto could choose differently on different ranks.
  void set_tuning(const Tuning& tuning);
  // The deadline of each call that follows, until changed again (Options::timeout,
  // ARCOLL_TIMEOUT, sets the first): a per-call override, e.g. longer for a first collective
  // that waits for slow starters, shorter for a health check. Each rank may set its own.
  void set_timeout(std::chrono::milliseconds timeout);
  // Gives up on this job: every other rank's call in progress (or next call) fails promptly,
  // naming this rank and `reason`, instead of waiting for this rank until its timeout, and
  // every later call on this communicator fails. May be called from another thread while a
  // call of this rank blocks (a watchdog): that call then fails within milliseconds.
  void abort(const std::string& reason = "no reason given");

  // Buffers that overlap other than in a call's in-place form are an error.
  // recv[i] = op over ranks of send[i]. send == recv is the in-place form.
  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void allreduce(void* buffer, std::size_t count, DataType type, ReduceOp op) {
    allreduce(buffer, buffer, count, type, op);
  }
  // send holds size()*recv_count elements; rank r receives block r of the reduction.
  // In place when recv == send + rank()*recv_count elements.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                      ReduceOp op);
  // recv holds size()*send_count elements, block r from rank r.
  // In place when send == recv + rank()*send_count elements.
  void allgather(const void* send, void* recv, std::size_t send_count, DataType type);
  void broadcast(void* buffer, std::size_t count, DataType type, int root);
  void barrier();

  // Point-to-point. Messages between a pair of ranks with the same tag arrive in order, and a
  // receive must name the same number of bytes as its send (a mismatch is an error).
  // Small messages complete without a matching receive; large ones wait for it (rendezvous).
  void send(const void* buffer, std::size_t bytes, int peer, int tag = 0);
  void recv(void* buffer, std::size_t bytes, int peer, int tag = 0);
  // Sends to `destination` and receives from `source` at the same time (as MPI_Sendrecv):
  // exchanges and shifts that would deadlock as a send then a receive on every rank.
  void sendrecv(const void* send_buffer, std::size_t send_bytes, int destination, void* recv_buffer,
                std::size_t recv_bytes, int source, int tag = 0);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace arcoll
