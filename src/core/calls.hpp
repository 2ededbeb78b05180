// What a communicator does with its calls once the facade (communicator.cpp) has checked them:
// numbers them, picks their algorithm, runs them on the message engine (at once when nothing
// is queued, else after what is, on the progress thread), and handles their failure: a failed
// call breaks the communicator and tells every peer, so that later calls fail at once with its
// cause instead of waiting.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/tuning.hpp"
#include "src/core/device_staging.hpp"
#include "src/core/engine.hpp"
#include "src/core/rendezvous.hpp"
#include "src/core/return_pacing.hpp"
#include "src/core/survivors.hpp"
#include "src/core/work_queue.hpp"

namespace arcoll {

class Communicator::Impl {
 public:
  Impl(const LaunchInfo& launch, const Options& options);
  // Work still queued fails at once (the peers are told), and then the progress thread stops.
  ~Impl();

  // A collective: run now when nothing is queued (the blocking form), else after what is.
  void execute(Collective collective, const CollectiveArgs& args);
  WorkPtr submit(Collective collective, const CollectiveArgs& args);
  // Several buffers reduced as one (each in place).
  void execute_coalesced(std::vector<Buffer> buffers, DataType type, ReduceOp op);
  WorkPtr submit_coalesced(std::vector<Buffer> buffers, DataType type, ReduceOp op);
  // One send, one receive, or both at once (sendrecv); `operation` names the call in errors.
  struct Transfer {
    Request::Kind kind;
    void* buffer;
    std::size_t bytes;
    int peer;
  };
  // Runs at once when nothing is queued (no allocation: a small message's cost), else queued.
  void execute_transfers(const char* operation, std::span<const Transfer> transfers, int tag);
  WorkPtr submit_transfers(const char* operation, std::vector<Transfer> transfers, int tag);
  // A non-blocking send or receive follows MPI's progress rule (src/core/transfers.cpp): posted at
  // once, or after the calls queued ahead of it, it completes as whatever its caller does next
  // moves the engine (a later call's waits, a wait or test of its Work), never queued behind a
  // call that waits for it. Collectives keep their order.
  WorkPtr post_transfer(const char* operation, Transfer transfer, int tag);
  // Moves the engine for the transfers in flight until `until` at most, unless another
  // thread's call does it meanwhile; completes the Works of those that ended.
  void move_transfers(const Work& waiting, std::chrono::steady_clock::time_point until);

  // Checks of a call's arguments, before it is issued: InvalidArgument naming `operation`.
  // `blocks` blocks of `count` elements each.
  void check_buffer(const char* operation, const void* buffer, std::size_t count, DataType type,
                    std::size_t blocks = 1) const;
  // Buffers of a call that overlap are allowed only in the call's in-place form, where
  // send == recv + in_place_offset elements (none: never).
  void check_overlap(const char* operation, const void* send, std::size_t send_count,
                     const void* recv, std::size_t recv_count, DataType type,
                     std::optional<std::ptrdiff_t> in_place_offset) const;
  void check_reduction(const char* operation, DataType type, ReduceOp op) const;
  void check_root(const char* operation, int root) const;
  void check_transfer(const char* operation, const Transfer& transfer, int tag) const;

  // Settings that shape the calls issued after them: they wait for the calls issued before.
  void set_algorithm(const std::string& name);
  void set_wire(DataType wire, std::optional<bool> error_feedback = std::nullopt);
  void set_tuning(const Tuning& tuning);
  void set_timeout(std::chrono::milliseconds timeout);
  Plan predict(Collective collective, const std::string& algorithm, std::size_t bytes) const;
  void abort(const std::string& reason);
  // Breaks the communicator, as abort() but still taking part in agreeing on the survivors:
  // the peers' calls fail promptly, and they come to the agreement.
  void break_for_shrink();

  Options options_;
  int rank_ = 0;
  // Read before the rendezvous: bad values fail this rank before anyone waits for it.
  std::uint64_t corrupt_at_ = 0;
  Tuning tuning_;  // from Options::tuning_file or set_tuning()
  // The agreement on survivors after a failure, listening before the rendezvous, which tells
  // every rank where the others' listen.
  Survivors survivors_;
  Rendezvous rendezvous_;
  std::unique_ptr<Engine> engine_;
  std::size_t copy_streaming_bytes_;  // copy_streaming_from(): this host's
  std::int64_t admitted_ = 0;  // newcomers admitted by grow() (src/core/membership.cpp)

 private:
  // Runs one call on the engine, under call_mutex_.
  void run(Collective collective, const CollectiveArgs& args);
  void run_coalesced(const std::vector<Buffer>& buffers, DataType type, ReduceOp op);
  void run_transfers(const char* operation, std::span<const Transfer> transfers, int tag);
  void refuse_on_progress_thread(const std::string& operation) const;
  void drain(const char* operation);  // waits for every queued call, before a setting changes
  template <class Name>
  void check_usable(const Name& operation) const;
  // A plan with what running it takes, looked up once per plan: the algorithm's function, and
  // its index in the registry (which the call's signature carries).
  struct PlannedCall {
    Plan plan;
    const CollectiveFn* fn = nullptr;
    int algorithm_index = -1;
  };
  // How a collective of `bytes` runs; valid until the next call.
  const PlannedCall& plan_for(Collective collective, std::size_t bytes);
  PlannedCall planned(Collective collective, Plan plan) const;
  // Whether a call of `bytes` on `wire` goes in whole halves rather than the plan's chunks
  // (calls.cpp).
  bool whole_halves(Collective collective, const Plan& plan, std::size_t bytes,
                    DataType wire) const;
  // The device memory a collective runs on, its buffers being `memory`'s (null: host copies).
  const DeviceMemoryInfo* runs_on_device(Collective collective, const DeviceMemoryInfo* memory,
                                         const CollectiveArgs& args, const PlannedCall& chosen,
                                         DataType wire) const;
  // A call's send and receive buffers on this rank, where it runs on `memory` (else none).
  std::array<std::span<const std::byte>, 2> device_buffers(Collective collective,
                                                           const CollectiveArgs& args,
                                                           const DeviceMemoryInfo* memory) const;
  [[noreturn]] void fail(const Error& e, const std::string& operation);
  // `buffer`: the caller's receive buffer, which the residual is kept for (args may be staged).
  void apply_error_feedback(const CollectiveArgs& args, DataType wire, const void* buffer);

  // A non-blocking transfer between its posting and its end.
  struct InFlight {
    RequestPtr request;
    std::shared_ptr<QueuedWork> work;
    std::string operation;  // "send of 64 B to rank 3 (tag 7)"
    std::chrono::steady_clock::time_point deadline;
    std::shared_ptr<char[]> host_copy;  // of a device buffer
    void* device_recv = nullptr;        // where a received host copy goes back to
  };
  void post_in_flight(const char* operation, const Transfer& transfer, int tag,
                      std::shared_ptr<QueuedWork> work);  // under call_mutex_
  // Under call_mutex_: the transfers that ended (or failed, or passed their deadline) leave
  // in_flight_ for ended_, whose Works end_transfers() completes once the lock is released
  // (their callbacks may issue calls).
  void settle_transfers();
  void end_transfers();
  std::vector<InFlight> in_flight_;
  std::mutex ended_mutex_;
  std::vector<std::pair<std::shared_ptr<QueuedWork>, std::exception_ptr>> ended_;
  std::atomic<bool> any_ended_{false};  // ended_ is not empty: read without the lock
  // Settles the transfers in flight as a call ends, under call_mutex_.
  struct SettleOnExit {
    Impl& impl;
    ~SettleOnExit() { impl.settle_transfers(); }
  };
  // Completes their Works once the call has released call_mutex_.
  struct EndTransfersOnExit {
    Impl& impl;
    ~EndTransfersOnExit() { impl.end_transfers(); }
  };

  // Error feedback: the rounding residual of the last all-reduce of each (buffer, count).
  std::map<std::pair<const void*, std::size_t>, std::vector<float>> residuals_;
  std::unordered_map<std::size_t, PlannedCall> auto_plans_;  // by all-reduce bytes
  std::map<Collective, PlannedCall> fixed_plans_;  // the rest, until set_algorithm
  // On buffers that fit the caches, by collective and whether in place.
  std::map<std::pair<Collective, bool>, ReturnPacing> return_pacing_;
  std::uint64_t sequence_ = 0;                     // collectives started
  std::string broken_;           // why the communicator can no longer be used
  std::vector<char> coalesced_;  // the buffers of a coalesced call, one after another
  std::vector<char> send_copy_;  // a send whose buffer the call's receive overwrites
  DeviceStaging staging_;        // host copies of a call's device buffers
  // The thread that runs a call holds call_mutex_ for the whole call; abort() from another
  // thread takes it once the call has failed (its waits watch for the request).
  std::mutex call_mutex_;
  // Destroyed first: the progress thread's calls use everything above.
  WorkQueue queue_;
};

// A communicator broken by an earlier failure, or aborted, refuses every call, naming it.
template <class Name>
void Communicator::Impl::check_usable(const Name& operation) const {
  if (broken_.empty() && engine_->abort_requested())
    throw PeerError(operation(), engine_->abort_text() + "; destroy this communicator", rank_);
  if (!broken_.empty())
    throw PeerError(operation(),
                    "this communicator can no longer be used after an earlier failure (" +
                        broken_ + "); destroy it and create a new one",
                    rank_);
}

}  // namespace arcoll
