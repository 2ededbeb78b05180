// The communicator: a group of ranks that run collectives together.
//
// A communicator is used by one thread at a time (its progress thread runs the non-blocking
// calls; abort() may come from any thread); every rank calls the same collectives in the same
// order (as with NCCL and MPI). Every call honours Options::timeout and throws an
// arcoll::Error naming the operation and the ranks involved instead of hanging.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "arcoll/launch.hpp"
#include "arcoll/local.hpp"
#include "arcoll/memory.hpp"
#include "arcoll/options.hpp"
#include "arcoll/types.hpp"
#include "arcoll/work.hpp"

namespace arcoll {

struct Tuning;

// One buffer of a coalesced call: `count` elements at `data`.
struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;
};

// What the cost model predicts for one call.
struct Prediction {
  std::string algorithm;
  std::size_t chunk_bytes = 0;  // the pipeline chunk it would run with
  double seconds = 0;
};

class Communicator {
 public:
  // Joins the job described by `launch` (rendezvous through rank 0's store). Returns once
  // every rank has set up its transports, so a rank may leave as soon as its calls return.
  Communicator(const LaunchInfo& launch, const Options& options);
  // Joins the job described by the environment: detect_launch() and Options::from_env().
  static std::unique_ptr<Communicator> from_env();

  ~Communicator();
  Communicator(const Communicator&) = delete;
  // A new communicator of the same ranks whose messages and calls never meet this one's (as
  // MPI_Comm_dup): for a library or a thread that needs its own. Collective: every rank calls
  // it, between the same calls; it carries this one's options and meets through its ranks.
  std::unique_ptr<Communicator> duplicate();
  // As duplicate(), with other settings (another transport, say: arbench measures several side
  // by side so); every rank passes the same.
  std::unique_ptr<Communicator> duplicate(const Options& options);
  // The ranks that give the same `color` (>= 0) form a new communicator, ranked in this one's
  // order (as MPI_Comm_split); a negative color joins none and gets null. Collective, like
  // duplicate().
  std::unique_ptr<Communicator> split(int color);
  // After a failure (a rank died, was stopped past the deadline, or aborted): a new
  // communicator of the live ranks, renumbered in this one's order, its transports set up
  // afresh (as MPIX_Comm_shrink). The live ranks agree on who they are even when more of them
  // fail meanwhile (src/core/survivors.hpp); each waits at most the timeout for a silent rank,
  // which is then left out and, if it comes back, fails its own shrink() with an error saying
  // so. Every live rank calls it; this communicator is broken from then on (a rank still in a
  // call of it fails promptly), and only destroying it remains. A rank that aborted this
  // communicator takes no part. The new communicator's algorithm and wire are the lowest
  // survivor's (survivors that failed different calls may hold different ones).
  std::unique_ptr<Communicator> shrink();
  // Where newcomers find this communicator to join it ("address:port" of rank 0's rendezvous
  // store); empty in a world of one, which has none.
  std::string rendezvous_address() const;
  // The job's secret that join() asks of newcomers (ARCOLL_JOB_TOKEN, or the launcher's): for
  // a program to hand to the processes it starts; "" when the job has none.
  const std::string& job_token() const;
  // Admits the processes waiting to join through rendezvous_address(): a new communicator of
  // these ranks followed by the newcomers, in the order they came. Waits, up to the timeout,
  // until `wait_for` newcomers wait, and admits every one waiting then. Collective: rank 0
  // counts the newcomers and tells the others, so that all agree on the new size before any
  // collective of it runs. A newcomer that comes while the group grows waits for the next
  // grow() of this communicator. Not in a world of one (no store).
  std::unique_ptr<Communicator> grow(int wait_for = 0);
  // A process joining a running group through `rendezvous_address` (a member's
  // rendezvous_address()), proving it knows the job's token: returns once a grow() of the
  // members admitted it, as one of the last ranks; TimeoutError when none did in time.
  static std::unique_ptr<Communicator> join(const std::string& rendezvous_address,
                                            const std::string& job_token,
                                            const Options& options);
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
  // Transports this build has (the choices of Options::transport besides "auto").
  static std::vector<std::string> transports();
  // Why `choice` (Options::transport) names no transport for some pairs, or "" when it does.
  static std::string transport_choice_problem(const std::string& choice);
  // The environment variables beyond Options that steer the way `transport`'s messages go
  // ("UCX_TLS=tcp" for "ucx"), "NAME=value" one per line; empty for another name.
  static std::string transport_environment(const std::string& transport);
  // Changes the algorithm of the collectives that follow ("auto" or a name); every rank must
  // make the same change between the same calls.
  void set_algorithm(const std::string& name);
  // The cost model's prediction for an all-reduce of `bytes` on this communicator with
  // `algorithm`, or with the one "auto" chooses.
  Prediction predict_allreduce(std::size_t bytes, const std::string& algorithm = "auto") const;
  // Algorithms that run `collective` ("allreduce", "reduce_scatter", "allgather", "broadcast",
  // "reduce", "gather", "scatter", "alltoall") and have a cost formula for it, sorted.
  static std::vector<std::string> algorithms(const std::string& collective);
  // The cost model's prediction for `collective` of `bytes`, its size as nccl-tests counts it
  // (the buffer of allreduce, reduce and broadcast; the whole of the blocks of the others),
  // with `algorithm`, or with the one "auto" runs (all-reduce: the model's choice; the others:
  // the boards while a call fits there, else the algorithm they go by beyond them).
  Prediction predict(const std::string& collective, std::size_t bytes,
                     const std::string& algorithm = "auto") const;
  // The cost model's prediction for a parameter server's push_pull of `bytes` on every rank of
  // this communicator (the workers), with `dedicated_servers` servers on hosts of their own
  // (0: a share in every worker) and pieces of `piece_bytes` (parameter_server.hpp). Its
  // algorithm reads "ps" or "ps/<servers>".
  Prediction predict_parameter_server(std::size_t bytes, int dedicated_servers,
                                               std::size_t piece_bytes = 4u << 20) const;

  // Mixed precision for the collectives that follow: f32 data reduced travels as f16 or bf16
  // (f32: as it is), as Options::wire; every rank must make the same change.
  void set_wire(DataType wire);
  // As set_wire(wire), and error feedback switched on or off (Options::wire_error_feedback).
  void set_wire(DataType wire, bool error_feedback);
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
  // call of this rank blocks (a watchdog): that call then fails within milliseconds. The ranks
  // agree on the collective given up on: every other rank fails it too, even where all its
  // messages had arrived (one that enters it later finds this rank's data waiting, and still
  // fails); only a rank whose call completed before the abort reached it keeps its result.
  void abort(const std::string& reason = "no reason given");

  // Buffers that overlap other than in a call's in-place form are an error.
  // recv[i] = op over ranks of send[i]. send == recv is the in-place form.
  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  void allreduce(void* buffer, std::size_t count, DataType type, ReduceOp op) {
    allreduce(buffer, buffer, count, type, op);
  }
  // Several buffers reduced in one call, their elements carried as one message stream (as a
  // training framework's bucket of gradients): each in place.
  void allreduce_coalesced(std::span<const Buffer> buffers, DataType type, ReduceOp op);
  // send holds size()*recv_count elements; rank r receives block r of the reduction.
  // In place when recv == send + rank()*recv_count elements.
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                      ReduceOp op);
  // recv holds size()*send_count elements, block r from rank r.
  // In place when send == recv + rank()*send_count elements.
  void allgather(const void* send, void* recv, std::size_t send_count, DataType type);
  void broadcast(void* buffer, std::size_t count, DataType type, int root);
  // The reduction of every rank's send lands in recv on `root` only (recv is not used, and
  // may be null, elsewhere). send == recv on the root is the in-place form.
  void reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
              int root);
  // On `root`, recv holds size()*send_count elements, block r from rank r (recv is not used
  // elsewhere). In place when send == recv + root*send_count elements on the root.
  void gather(const void* send, void* recv, std::size_t send_count, DataType type, int root);
  // On `root`, send holds size()*recv_count elements and rank r receives block r (send is not
  // used elsewhere). In place when recv == send + root*recv_count elements on the root.
  void scatter(const void* send, void* recv, std::size_t recv_count, DataType type, int root);
  // Block r of send (count elements) goes to rank r; block r of recv comes from rank r. send
  // and recv hold size()*count elements each; send == recv is the in-place form.
  void alltoall(const void* send, void* recv, std::size_t count, DataType type);
  // Blocks of their own sizes: send_counts[r] elements at send_offsets[r] of send go to rank r,
  // recv_counts[r] at recv_offsets[r] of recv come from rank r (offsets in elements; each span
  // holds size() entries). What rank a sends to b must be what b expects from a.
  void alltoallv(const void* send, std::span<const std::size_t> send_counts,
                 std::span<const std::size_t> send_offsets, void* recv,
                 std::span<const std::size_t> recv_counts,
                 std::span<const std::size_t> recv_offsets, DataType type);
  void barrier();

  // Non-blocking forms: the same checks at once, then the call runs on this communicator's
  // progress thread, after every call issued before it (blocking ones included), while this
  // thread goes on; the Work says when it is over (work.hpp). Buffers, and the count and
  // offset arrays, must stay valid until then. A call that fails fails every later one with
  // its cause; destroying the communicator fails what has not run.
  WorkPtr iallreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  WorkPtr iallreduce_coalesced(std::span<const Buffer> buffers, DataType type, ReduceOp op);
  WorkPtr ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                          ReduceOp op);
  WorkPtr iallgather(const void* send, void* recv, std::size_t send_count, DataType type);
  WorkPtr ibroadcast(void* buffer, std::size_t count, DataType type, int root);
  WorkPtr ireduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                  int root);
  WorkPtr igather(const void* send, void* recv, std::size_t send_count, DataType type, int root);
  WorkPtr iscatter(const void* send, void* recv, std::size_t recv_count, DataType type, int root);
  WorkPtr ialltoall(const void* send, void* recv, std::size_t count, DataType type);
  WorkPtr ialltoallv(const void* send, std::span<const std::size_t> send_counts,
                     std::span<const std::size_t> send_offsets, void* recv,
                     std::span<const std::size_t> recv_counts,
                     std::span<const std::size_t> recv_offsets, DataType type);
  WorkPtr ibarrier();

  // Point-to-point. Messages between a pair of ranks with the same tag arrive in order, and a
  // receive must name the same number of bytes as its send (a mismatch is an error).
  // Small messages complete without a matching receive; large ones wait for it (rendezvous).
  void send(const void* buffer, std::size_t bytes, int peer, int tag = 0);
  void recv(void* buffer, std::size_t bytes, int peer, int tag = 0);
  // Sends to `destination` and receives from `source` at the same time (as MPI_Sendrecv):
  // exchanges and shifts that would deadlock as a send then a receive on every rank. With one
  // buffer for both (as MPI_Sendrecv_replace), what goes out is what it held before.
  void sendrecv(const void* send_buffer, std::size_t send_bytes, int destination, void* recv_buffer,
                std::size_t recv_bytes, int source, int tag = 0);
  // Non-blocking forms, under MPI's progress rule: posted at once (after the calls queued ahead
  // of them), they complete as whatever this rank does next moves its messages: a later call
  // (a blocking recv or send among them), or a wait or test of their Work. So `isend` then
  // `recv`, or `irecv` then `send`, both ways, completes at any size.
  WorkPtr isend(const void* buffer, std::size_t bytes, int peer, int tag = 0);
  WorkPtr irecv(void* buffer, std::size_t bytes, int peer, int tag = 0);

  class Impl;

 private:
  friend class ParameterServer;  // runs its own loop on a duplicate's message engine
  std::unique_ptr<Communicator> split(int color, const Options& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace arcoll
