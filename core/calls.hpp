// What a communicator does with its calls once the facade (communicator.cpp) has checked them:
// numbers them, picks their algorithm, runs them on the message engine (at once when nothing
// is queued, else after what is, on the progress thread), and handles their failure: a failed
// call breaks the communicator and tells every peer, so that later calls fail at once with its
// cause instead of waiting.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/tuning.hpp"
#include "core/engine.hpp"
#include "core/rendezvous.hpp"
#include "core/work_queue.hpp"

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
  void execute_transfers(const char* operation, std::vector<Transfer> transfers, int tag);
  WorkPtr submit_transfers(const char* operation, std::vector<Transfer> transfers, int tag);

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
  Plan predict(const std::string& algorithm, std::size_t bytes) const;
  void abort(const std::string& reason);

  Options options_;
  int rank_ = 0;
  // Read before the rendezvous: bad values fail this rank before anyone waits for it.
  std::uint64_t corrupt_at_ = 0;
  Tuning tuning_;  // from Options::tuning_file or set_tuning()
  Rendezvous rendezvous_;
  std::unique_ptr<Engine> engine_;

 private:
  // Runs one call on the engine, under call_mutex_.
  void run(Collective collective, const CollectiveArgs& args);
  void run_coalesced(const std::vector<Buffer>& buffers, DataType type, ReduceOp op);
  void run_transfers(const char* operation, const std::vector<Transfer>& transfers, int tag);
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
  [[noreturn]] void fail(const Error& e, const std::string& operation);
  void apply_error_feedback(const CollectiveArgs& args, DataType wire);

  // Error feedback: the rounding residual of the last all-reduce of each (buffer, count).
  std::map<std::pair<const void*, std::size_t>, std::vector<float>> residuals_;
  std::unordered_map<std::size_t, PlannedCall> auto_plans_;  // by all-reduce bytes
  std::map<Collective, PlannedCall> fixed_plans_;  // the rest, until set_algorithm
  std::uint64_t sequence_ = 0;                     // collectives started
  std::string broken_;           // why the communicator can no longer be used
  std::vector<char> coalesced_;  // the buffers of a coalesced call, one after another
  std::vector<char> send_copy_;  // a send whose buffer the call's receive overwrites
  // The thread that runs a call holds call_mutex_ for the whole call; abort() from another
  // thread takes it once the call has failed (its waits watch for the request).
  std::mutex call_mutex_;
  // Destroyed first: the progress thread's calls use everything above.
  WorkQueue queue_;
};

}  // namespace arcoll
