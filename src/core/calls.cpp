#include "src/core/calls.hpp"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include "algorithms/cost_model.hpp"
#include "arcoll/error.hpp"
#include "src/base/cpu_location.hpp"
#include "src/base/log.hpp"
#include "src/base/reduce.hpp"
#include "src/core/call_signature.hpp"

namespace arcoll {
namespace {

using net::Clock;

// The algorithm each collective but all-reduce uses when Options::algorithm is "auto" or
// names an algorithm that does not implement that collective (board: on the shared boards
// while a call fits there, else by its messages algorithm). All-reduce under auto takes the
// cost model's choice.
const std::map<Collective, std::string> kDefaultAlgorithm = {
    {Collective::allreduce, "ring"},        {Collective::reduce_scatter, "board"},
    {Collective::allgather, "board"},       {Collective::broadcast, "board"},
    {Collective::barrier, "dissemination"}, {Collective::reduce, "board"},
    {Collective::gather, "board"},          {Collective::scatter, "board"},
    {Collective::alltoall, "board"},        {Collective::alltoallv, "direct"},
};

void check_algorithm(const std::string& name, int rank) {
  if (name == "auto" || AlgorithmRegistry::instance().find(name) != nullptr) return;
  throw InvalidArgument("communicator",
                        "unknown algorithm '" + name + "' (known: auto, " +
                            AlgorithmRegistry::instance().name_list() + ")",
                        rank);
}

// Checked before anyone waits on this rank; the log names the rank from here on.
Options checked(const Options& options, int rank) {
  log::set_rank(rank);
  if (options.chunk_bytes == 0) throw InvalidArgument("communicator", "chunk_bytes must be > 0");
  if (std::string why = timeout_problem(options.timeout); !why.empty())
    throw InvalidArgument("communicator", why);
  if (options.sockets_per_peer < 1 || options.sockets_per_peer > 64)
    throw InvalidArgument("communicator", "sockets_per_peer must be within 1..64");
  if (std::string why = tcp_congestion_problem(options.tcp_congestion); !why.empty())
    throw InvalidArgument("communicator", why);
  if (options.channels < 1 || options.channels > kMaxChannels)
    throw InvalidArgument("communicator",
                          "channels must be within 1.." + std::to_string(kMaxChannels));
  if (options.wire != DataType::f32 && options.wire != DataType::f16 &&
      options.wire != DataType::bf16)
    throw InvalidArgument("communicator", "the wire format must be f32, f16 or bf16");
  check_algorithm(options.algorithm, rank);
  if (std::string why = transport_choice_problem(options.transport); !why.empty())
    throw InvalidArgument("communicator", why, rank);
  return options;
}

// Collectives whose result is a reduction (`count` elements in recv; reduce: on the root).
bool reduces(Collective collective) {
  return collective == Collective::allreduce || collective == Collective::reduce_scatter ||
         collective == Collective::reduce;
}

// The size from which collectives that only copy write with streaming stores
// (Options::copy_streaming_bytes), said at debug level with what set it.
std::size_t copy_streaming_from(const Options& options, const Rendezvous& rendezvous) {
  auto said = [](std::size_t bytes, const char* why) {
    log::debug("collectives that only copy write with streaming stores from " +
               std::to_string(bytes) + " B (" + why + ")");
    return bytes;
  };
  if (options.copy_streaming_bytes)
    return said(*options.copy_streaming_bytes, "ARCOLL_COPY_STREAMING_BYTES");
  if (rendezvous.oversubscribed)
    return said(options.streaming_bytes, "more ranks than cores on this host");
  const auto cached = static_cast<std::size_t>(
      cache_per_buffer(last_level_cache_bytes(::sched_getcpu()), rendezvous.local_size));
  return cached > options.streaming_bytes
             ? said(cached, "this host's last-level cache")
             : said(options.streaming_bytes,
                    "ARCOLL_STREAMING_BYTES, as large as this host's cache share");
}

// What a collective's receivers do with what lands (Request::receivers).
Request::Receivers receivers_of(Collective collective, int size) {
  if (collective == Collective::broadcast)
    return size > 2 ? Request::Receivers::relayed : Request::Receivers::kept_by_one;
  if (collective == Collective::gather) return Request::Receivers::gathered;
  if (collective == Collective::allgather || collective == Collective::alltoall)
    return Request::Receivers::exchanged;
  return reduces(collective) ? Request::Receivers::pipelined : Request::Receivers::copy;
}

bool rooted(Collective collective) {
  return collective == Collective::broadcast || collective == Collective::reduce ||
         collective == Collective::gather || collective == Collective::scatter;
}

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes != 0 && b_bytes != 0 && x < y + b_bytes && y < x + a_bytes;
}

// Whether a reduction writes its result over its own input (the in-place forms: reduce-scatter's
// send holds a block per rank, the others' one).
bool reduces_in_place(Collective collective, const CollectiveArgs& args, int size) {
  if (!reduces(collective)) return false;
  const std::size_t bytes = args.count * size_of(args.type);
  const std::size_t blocks = collective == Collective::reduce_scatter ? std::size_t(size) : 1;
  return overlap(args.send, bytes * blocks, args.recv, bytes);
}

// "allreduce of 1024 f32": a queued call's description.
std::string describe(Collective collective, const CollectiveArgs& args) {
  if (collective == Collective::barrier) return "barrier";
  return std::string(to_string(collective)) + " of " +
         (collective == Collective::alltoallv ? std::string("blocks of")
                                              : std::to_string(args.count)) +
         " " + std::string(to_string(args.type));
}

// The transports of a rank that joined; a rank whose setup fails tells the others.
std::unique_ptr<Engine> set_up_engine(const Rendezvous& rendezvous, const Options& options,
                                      std::uint64_t corrupt_at) {
  try {
    return std::make_unique<Engine>(rendezvous, options, corrupt_at);
  } catch (const Error& e) {
    fail_join(rendezvous, e);
    throw;
  }
}

}  // namespace

Communicator::Impl::Impl(const LaunchInfo& launch, const Options& options)
    : options_(checked(options, launch.rank)),
      rank_(launch.rank),
      corrupt_at_(corruption_fault(launch.rank)),
      tuning_(options_.tuning_file.empty() ? Tuning{} : load_tuning(options_.tuning_file)),
      survivors_(launch.rank, launch.world_size, listen_address(launch, options_)),
      rendezvous_(arcoll::join(launch, options_, host_name_of(launch.rank, launch.world_size),
                               survivors_.endpoint(), Clock::now() + options_.timeout)),
      engine_(set_up_engine(rendezvous_, options_, corrupt_at_)),
      copy_streaming_bytes_(copy_streaming_from(options_, rendezvous_)) {
  survivors_.meet(rendezvous_.survivors_endpoints, rendezvous_.job_id, rendezvous_.job_token);
  engine_->apply_tuning(tuning_);
  finish_join(rendezvous_, Clock::now() + options_.timeout);
}

Communicator::Impl::~Impl() {
  if (const std::size_t pending = queue_.pending(); pending > 0)
    abort("the communicator was destroyed with " + std::to_string(pending) +
          " call(s) not completed");
  {
    std::lock_guard call(call_mutex_);
    std::lock_guard lock(ended_mutex_);
    for (InFlight& f : in_flight_)
      ended_.emplace_back(
          std::move(f.work),
          make_error(ErrorCode::peer_failure, f.operation,
                     "the communicator was destroyed before it completed", rank_, f.request->peer));
    in_flight_.clear();
    any_ended_.store(true, std::memory_order_release);
  }
  end_transfers();
}

// ---- checks ------------------------------------------------------------------------------

void Communicator::Impl::check_buffer(const char* operation, const void* buffer, std::size_t count,
                                      DataType type, std::size_t blocks) const {
  if (static_cast<unsigned>(type) > static_cast<unsigned>(DataType::i64))
    throw InvalidArgument(operation, "unknown data type", rank_);
  // Bytes must fit in 63 bits, with room for the size() blocks of gathered buffers.
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count, size_of(type) * static_cast<std::size_t>(rendezvous_.size),
                             &bytes) ||
      bytes > std::numeric_limits<std::size_t>::max() >> 1)
    throw InvalidArgument(operation, "count " + std::to_string(count) + " overflows", rank_);
  if (buffer == nullptr && count * blocks != 0)
    throw InvalidArgument(operation, "null buffer with count " + std::to_string(count * blocks),
                          rank_);
}

void Communicator::Impl::check_overlap(const char* operation, const void* send,
                                       std::size_t send_count, const void* recv,
                                       std::size_t recv_count, DataType type,
                                       std::optional<std::ptrdiff_t> in_place_offset) const {
  if (send_count == 0 || recv_count == 0) return;
  const auto s = reinterpret_cast<std::uintptr_t>(send);
  const auto r = reinterpret_cast<std::uintptr_t>(recv);
  const std::size_t element = size_of(type);
  if (s >= r + recv_count * element || r >= s + send_count * element) return;
  if (in_place_offset &&
      s - r == static_cast<std::uintptr_t>(*in_place_offset * static_cast<std::ptrdiff_t>(element)))
    return;
  throw InvalidArgument(operation,
                        in_place_offset
                            ? "the send and receive buffers overlap without being the in-place "
                              "form (see communicator.hpp): the result would depend on the "
                              "algorithm"
                            : "the send and receive buffers overlap: this call has no in-place "
                              "form",
                        rank_);
}

void Communicator::Impl::check_reduction(const char* operation, DataType type, ReduceOp op) const {
  if (static_cast<unsigned>(op) > static_cast<unsigned>(ReduceOp::avg))
    throw InvalidArgument(operation, "unknown reduction operator", rank_);
  if (!is_supported(type, op))
    throw InvalidArgument(operation,
                          "avg is only defined for floating-point types, not " +
                              std::string(to_string(type)) +
                              " (integer averages would truncate): use sum and divide",
                          rank_);
}

void Communicator::Impl::check_root(const char* operation, int root) const {
  if (root < 0 || root >= rendezvous_.size)
    throw InvalidArgument(operation,
                          "root " + std::to_string(root) + " is not a rank of this " +
                              std::to_string(rendezvous_.size) + "-rank communicator",
                          rank_);
}

void Communicator::Impl::check_transfer(const char* operation, const Transfer& t, int tag) const {
  if (t.peer < 0 || t.peer >= rendezvous_.size || t.peer == rank_)
    throw InvalidArgument(operation,
                          "peer " + std::to_string(t.peer) + " is not another rank of this " +
                              std::to_string(rendezvous_.size) + "-rank communicator",
                          rank_);
  if (t.buffer == nullptr && t.bytes != 0)
    throw InvalidArgument(operation, "null buffer with " + std::to_string(t.bytes) + " bytes",
                          rank_, t.peer);
  if (tag < 0) throw InvalidArgument(operation, "tags must be >= 0", rank_);
}

// ---- issuing -----------------------------------------------------------------------------

// A blocking call runs on the caller's thread when nothing is queued, as fast as before there
// was a queue; else it takes its turn on the progress thread and the caller waits for it.
void Communicator::Impl::execute(Collective collective, const CollectiveArgs& args) {
  if (queue_.idle()) {
    EndTransfersOnExit ended{*this};
    return run(collective, args);
  }
  refuse_on_progress_thread(describe(collective, args));
  submit(collective, args)->wait();
}

// A completion callback runs on the progress thread: a blocking call or a setting made there
// while calls are queued would wait for the thread it runs on. Refused before anything is
// queued.
void Communicator::Impl::refuse_on_progress_thread(const std::string& operation) const {
  if (queue_.on_its_thread())
    throw InvalidArgument(operation,
                          "a completion callback cannot wait for this communicator's queued "
                          "calls (it runs on the thread that serves them); issue the "
                          "non-blocking form instead",
                          rank_);
}

void Communicator::Impl::drain(const char* operation) {
  if (!queue_.idle()) refuse_on_progress_thread(operation);
  queue_.drain();
}

WorkPtr Communicator::Impl::submit(Collective collective, const CollectiveArgs& args) {
  return queue_.submit(describe(collective, args), [this, collective, args] {
    EndTransfersOnExit ended{*this};
    run(collective, args);
  });
}

void Communicator::Impl::execute_coalesced(std::vector<Buffer> buffers, DataType type,
                                           ReduceOp op) {
  if (queue_.idle()) {
    EndTransfersOnExit ended{*this};
    return run_coalesced(buffers, type, op);
  }
  refuse_on_progress_thread("coalesced allreduce");
  submit_coalesced(std::move(buffers), type, op)->wait();
}

WorkPtr Communicator::Impl::submit_coalesced(std::vector<Buffer> buffers, DataType type,
                                             ReduceOp op) {
  std::string description = "coalesced allreduce of " + std::to_string(buffers.size()) + " buffers";
  return queue_.submit(std::move(description), [this, buffers = std::move(buffers), type, op] {
    EndTransfersOnExit ended{*this};
    run_coalesced(buffers, type, op);
  });
}

void Communicator::Impl::execute_transfers(const char* operation,
                                           std::span<const Transfer> transfers, int tag) {
  if (queue_.idle()) {
    EndTransfersOnExit ended{*this};
    return run_transfers(operation, transfers, tag);
  }
  refuse_on_progress_thread(operation);
  submit_transfers(operation, {transfers.begin(), transfers.end()}, tag)->wait();
}

WorkPtr Communicator::Impl::submit_transfers(const char* operation, std::vector<Transfer> transfers,
                                             int tag) {
  return queue_.submit(operation, [this, operation, transfers = std::move(transfers), tag] {
    EndTransfersOnExit ended{*this};
    run_transfers(operation, transfers, tag);
  });
}

// ---- settings ----------------------------------------------------------------------------

void Communicator::Impl::set_algorithm(const std::string& name) {
  check_algorithm(name, rank_);
  drain("set_algorithm");
  std::lock_guard call(call_mutex_);
  options_.algorithm = name;
  fixed_plans_.clear();
}

void Communicator::Impl::set_wire(DataType wire, std::optional<bool> error_feedback) {
  if (wire != DataType::f32 && wire != DataType::f16 && wire != DataType::bf16)
    throw InvalidArgument("set_wire", "the wire format must be f32, f16 or bf16", rank_);
  drain("set_wire");
  std::lock_guard call(call_mutex_);
  options_.wire = wire;
  if (error_feedback) options_.wire_error_feedback = *error_feedback;
  fixed_plans_.clear();
}

void Communicator::Impl::set_tuning(const Tuning& tuning) {
  drain("set_tuning");
  std::lock_guard call(call_mutex_);
  tuning_ = tuning;
  engine_->apply_tuning(tuning_);
  auto_plans_.clear();
}

void Communicator::Impl::set_timeout(std::chrono::milliseconds timeout) {
  if (std::string why = timeout_problem(timeout); !why.empty())
    throw InvalidArgument("set_timeout", why, rank_);
  drain("set_timeout");
  std::lock_guard call(call_mutex_);
  options_.timeout = timeout;
}

Plan Communicator::Impl::predict(Collective collective, const std::string& algorithm,
                                 std::size_t bytes) const {
  const auto b = static_cast<double>(bytes);
  const Layout& layout = engine_->layout();
  if (algorithm != "auto") return cost::predict(algorithm, layout, b, collective);
  if (collective == Collective::allreduce) return cost::best(layout, b);
  return cost::predict(kDefaultAlgorithm.at(collective), layout, b, collective);
}

Communicator::Impl::PlannedCall Communicator::Impl::planned(Collective collective,
                                                            Plan plan) const {
  const CollectiveFn* fn = find_collective(plan.algorithm, collective);
  const int index = AlgorithmRegistry::instance().index_of(plan.algorithm);
  return {std::move(plan), fn, index};
}

const Communicator::Impl::PlannedCall& Communicator::Impl::plan_for(Collective collective,
                                                                    std::size_t bytes) {
  // Cached: small collectives should not pay for the model or for looking up names.
  if (collective == Collective::allreduce && options_.algorithm == "auto") {
    auto cached = auto_plans_.find(bytes);
    if (cached != auto_plans_.end()) return cached->second;
    if (auto_plans_.size() > 4096) auto_plans_.clear();  // sizes seen by one job stay few
    return auto_plans_[bytes] = planned(collective, predict(collective, "auto", bytes));
  }
  auto fixed = fixed_plans_.find(collective);
  if (fixed != fixed_plans_.end()) return fixed->second;
  const bool implemented = find_collective(options_.algorithm, collective) != nullptr;
  return fixed_plans_[collective] = planned(
             collective, {implemented ? options_.algorithm : kDefaultAlgorithm.at(collective),
                          options_.chunk_bytes, 0});
}

// ---- running -----------------------------------------------------------------------------

void Communicator::Impl::apply_error_feedback(const CollectiveArgs& args, DataType wire,
                                              const void* buffer) {
  auto& residual = residuals_[{buffer, args.count}];
  residual.resize(args.count, 0.0f);
  // recv = send + what rounding lost last time; the new residual is what it loses now.
  kernels::reduce(args.recv, args.send, residual.data(), args.count, DataType::f32, ReduceOp::sum);
  std::copy_n(static_cast<const float*>(args.recv), args.count, residual.begin());
  engine_->round_through_wire(args.recv, args.count, wire);
  const auto* rounded = static_cast<const float*>(args.recv);
  for (std::size_t i = 0; i < args.count; ++i) residual[i] -= rounded[i];
}

void Communicator::Impl::fail(const Error& e, const std::string& operation) {
  broken_ = e.what();
  engine_->fail(e, operation);
}

void Communicator::Impl::abort(const std::string& reason) {
  survivors_.leave();
  // A call in progress sees the request within moments, fails and tells the peers.
  if (!engine_->request_abort(reason)) return;
  std::lock_guard call(call_mutex_);
  if (!broken_.empty()) return;
  broken_ = engine_->abort_text();
  engine_->abort_links(broken_);
}

void Communicator::Impl::break_for_shrink() {
  engine_->request_abort("it is shrinking the communicator to its survivors");
  std::lock_guard call(call_mutex_);
  if (!broken_.empty()) return;
  broken_ = engine_->abort_text();
  engine_->abort_links(broken_);
}

// On 2 ranks of one host whose transport reads large messages of a reduction across
// (Transport::reads_reductions_across), an all-reduce of 2-16 MiB by halving-doubling (auto's
// choice there; its one round gives a half and takes the other back) goes in whole halves: each
// rank reads its partner's half across (shm: halves above
// ARCOLL_SHM_SINGLE_COPY_PIPELINED_BYTES, 1 MiB; UCX: by its rendezvous), reduces it and
// forwards the result whole, which the partner reads back: two copies by the kernel and a
// reduction, where chunks through the rings take three copies and a reduction. Decided on what
// every rank shares (the messages' shape must agree), not on a rank's own settings or buffers. 2
// ranks of an Intel Xeon VM (260 MiB L3), medians of 3 interleaved runs, us, chunks -> whole
// halves, out of place / in place: 4 MiB 882 / 768 -> 663 / 570, 8 MiB 1702 / 1442 -> 1335 / 1169,
// 16 MiB 3837 / 2899 -> 4485 / 2412, 32 MiB 7832 / 6512 -> 10973 / 12886 (Open MPI in place,
// reading across too: 728, 1463 and 2844 us at 4, 8 and 16 MiB). On 4 ranks of 2 cores whole
// messages lost out of place from 8 MiB. Each rank holds its whole call in flight at once,
// where chunks pass through the caches a piece at a time: whole halves only where the call
// fills at most half of the cache window (LinkCost::cached_until, a sixteenth of the
// calibrated last-level cache on 2 ranks). On 2 ranks of an AMD EPYC VM (32 MiB L3), 5
// interleaved runs, us, whole halves -> chunks, out of place / in place: shm 4 MiB 1556 / 2372
// -> 481 / 414, 8 MiB 1794 / 1201 -> 1259 / 592 (with transparent huge pages "always", whose
// reads across pin a page per 2 MiB: 4 MiB 608 / 460 -> 359 / 271); UCX 4 MiB 564 / 431 -> 524
// / 344, 8 MiB 2237 / 1456 -> 1268 / 809.
constexpr std::size_t kWholeHalvesAbove = std::size_t{2} << 20;
constexpr std::size_t kWholeHalvesBelow = std::size_t{16} << 20;

bool Communicator::Impl::whole_halves(Collective collective, const Plan& plan, std::size_t bytes,
                                      DataType wire) const {
  // The size first: every all-reduce asks, small ones should pay one comparison.
  const Layout& layout = engine_->layout();
  return bytes > kWholeHalvesAbove && bytes < kWholeHalvesBelow &&
         collective == Collective::allreduce && rendezvous_.size == 2 && wire == DataType::f32 &&
         layout.hosts == 1 && 2.0 * static_cast<double>(bytes) <= layout.intra.cached_until &&
         engine_->reads_reductions_across_within_hosts() && plan.algorithm == "halving_doubling";
}

void Communicator::Impl::run(Collective collective, const CollectiveArgs& args) {
  std::lock_guard call(call_mutex_);
  SettleOnExit settle{*this};
  check_usable(
      [&] { return std::string(to_string(collective)) + " #" + std::to_string(sequence_ + 1); });
  const int size = rendezvous_.size;
  const bool narrowable =
      collective == Collective::allreduce || collective == Collective::reduce_scatter;
  const DataType wire =
      narrowable && args.type == DataType::f32 && size > 1 ? options_.wire : DataType::f32;
  const bool narrowed = wire != DataType::f32;
  const std::size_t bytes = args.count * size_of(args.type);
  const PlannedCall& chosen = plan_for(collective, narrowed ? bytes / 2 : bytes);
  // Device buffers: the call runs on them where it can (runs_on_device), else on host copies.
  const CallMemory memory = memory_of_call(collective, args, rank_, size);
  const DeviceMemoryInfo* on_device =
      memory.mixed ? nullptr : runs_on_device(collective, memory.device, args, chosen, wire);
  CollectiveArgs host = args;
  if (memory.device != nullptr && on_device == nullptr) {
    try {
      host = staging_.stage(collective, args, rank_, size);
    } catch (const Error&) {
      staging_.drop();
      throw;
    }
  }
  ++sequence_;
  const bool beyond_caches =
      bytes >= (reduces(collective) ? options_.streaming_bytes : copy_streaming_bytes_);
  const bool in_place = reduces_in_place(collective, host, size);
  const std::size_t chunk_bytes =
      whole_halves(collective, chosen.plan, bytes, wire) ? bytes : chosen.plan.chunk_bytes;
  // Calls of one chunk never pace: only larger ones ask (and are timed).
  ReturnPacing* pacing =
      beyond_caches || bytes <= chunk_bytes ? nullptr : &return_pacing_[{collective, in_place}];
  const bool pace_returns = beyond_caches || (pacing != nullptr && pacing->next(bytes));
  const auto started = pacing != nullptr ? std::chrono::steady_clock::now()
                                          : std::chrono::steady_clock::time_point{};
  engine_->begin({.kind = to_string(collective),
                  .sequence = sequence_,
                  .signature = pack({collective, args.type, args.op, chosen.algorithm_index,
                                     args.root, args.count, wire}),
                  .root = args.root,
                  .wire = wire,
                  .chunk_bytes = chunk_bytes,
                  .pace_returns = pace_returns,
                  // In place, every line written was just read as the rank's own operand:
                  // streaming stores save no read there and only push the result out of the
                  // caches (16 MiB in place on 2 ranks: 1.7 times as long).
                  .streaming_stores = beyond_caches && !in_place,
                  .receivers = receivers_of(collective, size),
                  .memory = on_device,
                  .device_buffers = device_buffers(collective, args, on_device)},
                 options_.timeout);
  CollectiveArgs effective = host;
  if (args.op == ReduceOp::avg) effective.op = ReduceOp::sum;
  try {
    const bool narrowed_allreduce = narrowed && collective == Collective::allreduce;
    if (narrowed_allreduce && options_.wire_error_feedback) {
      apply_error_feedback(host, wire, args.recv);
      effective.send = host.recv;
    }
    const bool checks_root = rooted(collective) && size > 1;
    if (checks_root) engine_->post_root_check(args.root, bytes);
    (*chosen.fn)(*engine_, effective);
    if (checks_root) engine_->finish_root_check();
    engine_->end();
    if (pacing != nullptr && engine_->pacing_asked())
      pacing->add(bytes, pace_returns, std::chrono::steady_clock::now() - started);
    // The rank that finished a segment holds it in f32, the others as it came off the wire:
    // one more rounding makes every rank's result the same.
    if (narrowed_allreduce) engine_->round_through_wire(host.recv, args.count, wire);
    // The reductions leave args.count reduced elements in recv (reduce: on the root).
    const bool holds_result = collective != Collective::reduce || args.root == rank_;
    if (args.op == ReduceOp::avg && reduces(collective) && holds_result)
      kernels::divide_by(host.recv, args.count, args.type, size);
    staging_.finish();
  } catch (const Error& e) {
    staging_.drop();
    // This rank's own bad argument leaves the communicator usable; one that another rank
    // disagrees with (a call mismatch) breaks it, and the peers are told.
    const bool own_mistake = e.code() == ErrorCode::invalid_argument &&
                             e.peer() == Error::kNoRank && engine_->transport_failure() == nullptr;
    if (own_mistake) throw_error(e.code(), engine_->call_name(), e.message(), rank_, e.peer());
    fail(e, engine_->call_name());
  }
}

const DeviceMemoryInfo* Communicator::Impl::runs_on_device(Collective collective,
                                                           const DeviceMemoryInfo* memory,
                                                           const CollectiveArgs& args,
                                                           const PlannedCall& chosen,
                                                           DataType wire) const {
  // On the device, every rank reads its peers' buffers there (shm: CUDA IPC) and reduces with
  // the kind's kernels (one rank copies there); a 16-bit wire and avg's division keep to host
  // copies, as do calls that meet on the boards, which read the buffers with the host (a
  // composite algorithm may choose the boards inside). Every rank of a call decides alike but
  // for its buffers' kind and the transports it has, and ranks on the device and on host copies
  // exchange the same messages.
  if (memory == nullptr || !memory->share || !memory->reduce || wire != DataType::f32 ||
      args.op == ReduceOp::avg)
    return nullptr;
  const AlgorithmInfo* algorithm = AlgorithmRegistry::instance().find(chosen.plan.algorithm);
  if (algorithm == nullptr || algorithm->composite ||
      (algorithm->reads_buffers && algorithm->reads_buffers(collective, *engine_, args)))
    return nullptr;
  const auto buffers = device_buffers(collective, args, memory);
  std::array<const void*, 2> used{};
  std::size_t count = 0;
  for (const auto& buffer : buffers)
    if (!buffer.empty()) used[count++] = buffer.data();
  if (engine_->takes_device_everywhere(*memory, std::span(used.data(), count))) return memory;
  // Where a peer's transport cannot read the buffers, a large call's messages to it are copied
  // through host memory one by one (Engine::post), which overlaps the copies with the network;
  // a small one is copied whole. A checked call reads every message with the host.
  return !options_.checksum && args.count * size_of(args.type) >= options_.device_pipeline_bytes
             ? memory
             : nullptr;
}

std::array<std::span<const std::byte>, 2> Communicator::Impl::device_buffers(
    Collective collective, const CollectiveArgs& args, const DeviceMemoryInfo* memory) const {
  if (memory == nullptr) return {};
  const auto [send_bytes, recv_bytes] = buffer_bytes(collective, args, rank_, rendezvous_.size);
  return {std::span(static_cast<const std::byte*>(args.send), send_bytes),
          std::span(static_cast<const std::byte*>(args.recv), recv_bytes)};
}

void Communicator::Impl::run_coalesced(const std::vector<Buffer>& buffers, DataType type,
                                       ReduceOp op) {
  // One all-reduce over the buffers laid end to end (as Horovod's tensor fusion and torch's
  // coalesced calls do): one message stream, one pass of the algorithm.
  const std::size_t elem = size_of(type);
  std::size_t total = 0;
  for (const Buffer& b : buffers) total += b.count;
  coalesced_.resize(total * elem);
  std::size_t at = 0;
  for (const Buffer& b : buffers) {
    copy_to_host(coalesced_.data() + at, b.data, b.count * elem);
    at += b.count * elem;
  }
  run(Collective::allreduce, {coalesced_.data(), coalesced_.data(), total, type, op, 0});
  at = 0;
  for (const Buffer& b : buffers) {
    copy_from_host(b.data, coalesced_.data() + at, b.count * elem);
    at += b.count * elem;
  }
}

void Communicator::Impl::run_transfers(const char* operation,
                                       std::span<const Transfer> transfers, int tag) {
  std::lock_guard call(call_mutex_);
  SettleOnExit settle{*this};
  check_usable([&] { return std::string(operation); });
  const bool exchanges = transfers.size() == 2 && transfers[0].kind != transfers[1].kind;
  engine_->begin(
      {.kind = operation,
       .chunk_bytes = options_.chunk_bytes,
       .receivers = exchanges ? Request::Receivers::exchanged : Request::Receivers::copy},
      options_.timeout);
  try {
    // A send, a receive, or one of each: no allocation on a small call's path.
    std::array<RequestPtr, 2> posted;
    std::size_t count = 0;
    // A call's last transfer, a receive with nothing posted before it (a receive, or a send/recv
    // whose send went at once), takes its message from the transport at once where it can: the
    // message of a small call is mostly there, or comes within moments, and a request, its
    // matching and the wait would cost more than the message's cache line (send/recv on 2
    // ranks over shm, medians of 7 interleaved runs: 8 B 0.21 -> 0.15 us, 128 B 0.27 -> 0.20,
    // 2 KiB 0.50 -> 0.46). Sends go first so that it can.
    for (std::size_t i = 0; i < transfers.size(); ++i) {
      const Transfer& t = transfers[i];
      const bool send = t.kind == Request::Kind::send;
      const bool overlapped =
          std::any_of(transfers.begin(), transfers.end(), [&](const Transfer& o) {
            return o.kind != t.kind && overlap(o.buffer, o.bytes, t.buffer, t.bytes);
          });
      // Device memory stays there where the peer's transport reads it from the device (shm:
      // CUDA IPC) and no receive of the call overlaps it; elsewhere a host copy (what a send
      // reads, or a receive shares with one). Its kind is asked once: on a host with a GPU,
      // each asking is a call into CUDA.
      const DeviceMemoryInfo* memory = t.bytes == 0 ? nullptr : device_memory_of(t.buffer);
      if (memory != nullptr && !overlapped && engine_->takes_device(t.peer, *memory, t.buffer)) {
        posted.at(count++) = engine_->post_tagged(t.kind, t.peer, t.buffer, t.bytes,
                                                  static_cast<std::uint32_t>(tag), memory);
        continue;
      }
      void* buffer = memory == nullptr
                         ? t.buffer
                         : staging_.stage(t.buffer, t.bytes, send || overlapped, !send);
      if (send &&
          engine_->send_now(t.peer, static_cast<std::uint32_t>(tag), buffer, t.bytes, overlapped))
        continue;
      if (!send && memory == nullptr && count == 0 && i + 1 == transfers.size() &&
          engine_->receive_now(t.peer, static_cast<std::uint32_t>(tag), buffer, t.bytes))
        continue;
      // A send whose bytes a receive of the same call overwrites, and that its transport did
      // not take all at once, goes from a copy.
      if (send && overlapped) {
        send_copy_.assign(static_cast<const char*>(buffer),
                          static_cast<const char*>(buffer) + t.bytes);
        buffer = send_copy_.data();
      }
      posted.at(count++) =
          engine_->post_tagged(t.kind, t.peer, buffer, t.bytes, static_cast<std::uint32_t>(tag));
    }
    for (std::size_t i = 0; i < count; ++i) engine_->wait(posted[i]);
    staging_.finish();
  } catch (const Error& e) {
    staging_.drop();
    fail(e, operation);
  }
}

}  // namespace arcoll
