#include "arcoll/communicator.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>

#include "algorithms/algorithm.hpp"
#include "algorithms/cost_model.hpp"
#include "arcoll/error.hpp"
#include "arcoll/tuning.hpp"
#include "base/log.hpp"
#include "base/reduce.hpp"
#include "core/call_signature.hpp"
#include "core/engine.hpp"
#include "core/rendezvous.hpp"

namespace arcoll {
namespace {

using net::Clock;

// The algorithm each collective but all-reduce uses when Options::algorithm is "auto" or
// names an algorithm that does not implement that collective. All-reduce under auto takes
// the cost model's choice.
const std::map<Collective, std::string> kDefaultAlgorithm = {
    {Collective::allreduce, "ring"},        {Collective::reduce_scatter, "ring"},
    {Collective::allgather, "ring"},        {Collective::broadcast, "ring"},
    {Collective::barrier, "dissemination"},
};

void check_algorithm(const std::string& name, int rank) {
  if (name == "auto" || AlgorithmRegistry::instance().find(name) != nullptr) return;
  throw InvalidArgument("communicator",
                        "unknown algorithm '" + name +
                            "' (known: auto, " + AlgorithmRegistry::instance().name_list() + ")",
                        rank);
}

// Checked before anyone waits on this rank; the log names the rank from here on.
Options checked(const Options& options, int rank) {
  log::set_rank(rank);
  if (options.chunk_bytes == 0) throw InvalidArgument("communicator", "chunk_bytes must be > 0");
  if (options.sockets_per_peer < 1 || options.sockets_per_peer > 64)
    throw InvalidArgument("communicator", "sockets_per_peer must be within 1..64");
  if (options.channels < 1 || options.channels > kMaxChannels)
    throw InvalidArgument("communicator",
                          "channels must be within 1.." + std::to_string(kMaxChannels));
  if (options.wire != DataType::f32 && options.wire != DataType::f16 &&
      options.wire != DataType::bf16)
    throw InvalidArgument("communicator", "the wire format must be f32, f16 or bf16");
  check_algorithm(options.algorithm, rank);
  if (options.transport != "auto" && TransportRegistry::instance().find(options.transport) == nullptr)
    throw InvalidArgument("communicator",
                          "unknown transport '" + options.transport + "' (known: auto, " +
                              TransportRegistry::instance().name_list() + ")",
                          rank);
  return options;
}

}  // namespace

// The facade's work: validation, plans, the call's bookkeeping and failure handling, over the
// rendezvous (where every rank runs) and the message engine (how messages travel).
class Communicator::Impl {
 public:
  Impl(const LaunchInfo& launch, const Options& options);

  void set_tuning(const Tuning& tuning) {
    std::lock_guard call(call_mutex_);
    tuning_ = tuning;
    engine_->apply_tuning(tuning_);
  }
  // Runs one collective with validation, deadline and error reporting.
  void run(Collective collective, const CollectiveArgs& args);
  // One send, one receive, or both at once (sendrecv); `operation` names the call in errors.
  struct Transfer {
    Request::Kind kind;
    void* buffer;
    std::size_t bytes;
    int peer;
  };
  void point_to_point(const char* operation, std::initializer_list<Transfer> transfers, int tag);
  // `blocks` blocks of `count` elements each.
  void check_buffer(const char* operation, const void* buffer, std::size_t count, DataType type,
                    std::size_t blocks = 1);
  // Buffers of a call that overlap are allowed only in the call's in-place form, where
  // send == recv + in_place_offset elements.
  void check_overlap(const char* operation, const void* send, std::size_t send_count,
                     const void* recv, std::size_t recv_count, DataType type,
                     std::ptrdiff_t in_place_offset);
  template <class Name>
  void check_usable(const Name& operation) const {
    if (broken_.empty() && engine_->abort_requested())
      throw PeerError(operation(), engine_->abort_text() + "; destroy this communicator", rank_);
    if (!broken_.empty())
      throw PeerError(operation(),
                      "this communicator can no longer be used after an earlier failure (" +
                          broken_ + "); destroy it and create a new one",
                      rank_);
  }
  // The algorithm (and chunk) a collective of `bytes` runs with; valid until the next call.
  const Plan& plan_for(Collective collective, std::size_t bytes);
  void set_algorithm(const std::string& name) {
    options_.algorithm = name;
    fixed_plans_.clear();
  }
  void set_wire(DataType wire) {
    if (wire != DataType::f32 && wire != DataType::f16 && wire != DataType::bf16)
      throw InvalidArgument("set_wire", "the wire format must be f32, f16 or bf16", rank_);
    options_.wire = wire;
    fixed_plans_.clear();
  }
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
  [[noreturn]] void fail(const Error& e, const std::string& operation);
  void apply_error_feedback(const CollectiveArgs& args, DataType wire);

  // Error feedback: the rounding residual of the last all-reduce of each (buffer, count).
  std::map<std::pair<const void*, std::size_t>, std::vector<float>> residuals_;
  std::unordered_map<std::size_t, Plan> auto_plans_;  // by all-reduce bytes
  std::map<Collective, Plan> fixed_plans_;            // the rest, until set_algorithm
  std::uint64_t sequence_ = 0;                        // collectives started
  std::string broken_;  // why the communicator can no longer be used
  // abort() may come from another thread while a call blocks: the call thread holds
  // call_mutex_ for the whole call, and the engine's waits watch for the request.
  std::mutex call_mutex_;
};

Communicator::Impl::Impl(const LaunchInfo& launch, const Options& options)
    : options_(checked(options, launch.rank)),
      rank_(launch.rank),
      corrupt_at_(corruption_fault(launch.rank)),
      tuning_(options_.tuning_file.empty() ? Tuning{} : load_tuning(options_.tuning_file)),
      rendezvous_(join(launch, options_, host_name_of(launch.rank, launch.world_size),
                       Clock::now() + options_.timeout)),
      engine_(std::make_unique<Engine>(rendezvous_, options_, corrupt_at_)) {
  engine_->apply_tuning(tuning_);
}

void Communicator::Impl::check_buffer(const char* operation, const void* buffer, std::size_t count,
                                      DataType type, std::size_t blocks) {
  if (static_cast<unsigned>(type) > static_cast<unsigned>(DataType::i64))
    throw InvalidArgument(operation, "unknown data type", rank_);
  // Bytes must fit in 63 bits, with room for the size() blocks of gathered buffers.
  const std::size_t limit = (std::numeric_limits<std::size_t>::max() >> 1) / size_of(type) /
                            static_cast<std::size_t>(rendezvous_.size);
  if (count > limit)
    throw InvalidArgument(operation, "count " + std::to_string(count) + " overflows", rank_);
  if (buffer == nullptr && count * blocks != 0)
    throw InvalidArgument(operation, "null buffer with count " + std::to_string(count * blocks),
                          rank_);
}

void Communicator::Impl::check_overlap(const char* operation, const void* send,
                                       std::size_t send_count, const void* recv,
                                       std::size_t recv_count, DataType type,
                                       std::ptrdiff_t in_place_offset) {
  if (send_count == 0 || recv_count == 0) return;
  const auto s = reinterpret_cast<std::uintptr_t>(send);
  const auto r = reinterpret_cast<std::uintptr_t>(recv);
  const std::size_t element = size_of(type);
  if (s >= r + recv_count * element || r >= s + send_count * element) return;
  if (s - r == static_cast<std::uintptr_t>(in_place_offset * static_cast<std::ptrdiff_t>(element)))
    return;
  throw InvalidArgument(operation,
                        "the send and receive buffers overlap without being the in-place form "
                        "(see communicator.hpp): the result would depend on the algorithm",
                        rank_);
}

Plan Communicator::Impl::predict(const std::string& algorithm, std::size_t bytes) const {
  const auto b = static_cast<double>(bytes);
  const Layout& layout = engine_->layout();
  return algorithm == "auto" ? cost::best(layout, b) : cost::predict(algorithm, layout, b);
}

const Plan& Communicator::Impl::plan_for(Collective collective, std::size_t bytes) {
  // Cached: small collectives should not pay for the model or for copying names.
  if (collective == Collective::allreduce && options_.algorithm == "auto") {
    auto cached = auto_plans_.find(bytes);
    if (cached != auto_plans_.end()) return cached->second;
    if (auto_plans_.size() > 4096) auto_plans_.clear();  // sizes seen by one job stay few
    return auto_plans_[bytes] = predict("auto", bytes);
  }
  auto fixed = fixed_plans_.find(collective);
  if (fixed != fixed_plans_.end()) return fixed->second;
  const bool implemented = find_collective(options_.algorithm, collective) != nullptr;
  return fixed_plans_[collective] = {
             implemented ? options_.algorithm : kDefaultAlgorithm.at(collective),
             options_.chunk_bytes, 0};
}

void Communicator::Impl::apply_error_feedback(const CollectiveArgs& args, DataType wire) {
  auto& residual = residuals_[{args.recv, args.count}];
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
  // A call in progress sees the request within moments, fails and tells the peers.
  if (!engine_->request_abort(reason)) return;
  std::lock_guard call(call_mutex_);
  if (!broken_.empty()) return;
  broken_ = engine_->abort_text();
  engine_->abort_links(broken_);
}

void Communicator::Impl::run(Collective collective, const CollectiveArgs& args) {
  std::lock_guard call(call_mutex_);
  // Validation happens before the call gets its number.
  auto next_name = [&] {
    return std::string(to_string(collective)) + " #" + std::to_string(sequence_ + 1);
  };
  check_usable(next_name);
  if (static_cast<unsigned>(args.op) > static_cast<unsigned>(ReduceOp::avg))
    throw InvalidArgument(next_name(), "unknown reduction operator", rank_);
  if (!is_supported(args.type, args.op))
    throw InvalidArgument(next_name(),
                          "avg is only defined for floating-point types, not " +
                              std::string(to_string(args.type)) +
                              " (integer averages would truncate): use sum and divide",
                          rank_);
  const int size = rendezvous_.size;
  if (args.root < 0 || args.root >= size)
    throw InvalidArgument(next_name(),
                          "root " + std::to_string(args.root) + " is not a rank of this " +
                              std::to_string(size) + "-rank communicator",
                          rank_);
  ++sequence_;
  const bool reduces =
      collective == Collective::allreduce || collective == Collective::reduce_scatter;
  const DataType wire =
      reduces && args.type == DataType::f32 && size > 1 ? options_.wire : DataType::f32;
  const bool narrowed = wire != DataType::f32;
  const std::size_t bytes = args.count * size_of(args.type);
  const Plan& plan = plan_for(collective, narrowed ? bytes / 2 : bytes);
  const CollectiveFn* fn = find_collective(plan.algorithm, collective);
  engine_->begin({.kind = to_string(collective),
                  .sequence = sequence_,
                  .signature = pack({collective, args.type, args.op,
                                     AlgorithmRegistry::instance().index_of(plan.algorithm),
                                     args.root, args.count}),
                  .wire = wire,
                  .chunk_bytes = plan.chunk_bytes},
                 options_.timeout);
  CollectiveArgs effective = args;
  if (args.op == ReduceOp::avg) effective.op = ReduceOp::sum;
  try {
    const bool narrowed_allreduce = narrowed && collective == Collective::allreduce;
    if (narrowed_allreduce && options_.wire_error_feedback) {
      apply_error_feedback(args, wire);
      effective.send = args.recv;
    }
    (*fn)(*engine_, effective);
    // The rank that finished a segment holds it in f32, the others as it came off the wire:
    // one more rounding makes every rank's result the same.
    if (narrowed_allreduce) engine_->round_through_wire(args.recv, args.count, wire);
    // allreduce and reduce_scatter both leave args.count reduced elements in recv.
    if (args.op == ReduceOp::avg) kernels::divide_by(args.recv, args.count, args.type, size);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::invalid_argument && engine_->transport_failure() == nullptr)
      throw_error(e.code(), engine_->call_name(), e.message(), rank_, e.peer());
    fail(e, engine_->call_name());
  }
}

void Communicator::Impl::point_to_point(const char* operation,
                                        std::initializer_list<Transfer> transfers, int tag) {
  std::lock_guard call(call_mutex_);
  check_usable([&] { return std::string(operation); });
  const int size = rendezvous_.size;
  for (const Transfer& t : transfers) {
    if (t.peer < 0 || t.peer >= size || t.peer == rank_)
      throw InvalidArgument(operation,
                            "peer " + std::to_string(t.peer) + " is not another rank of this " +
                                std::to_string(size) + "-rank communicator",
                            rank_);
    if (t.buffer == nullptr && t.bytes != 0)
      throw InvalidArgument(operation, "null buffer with " + std::to_string(t.bytes) + " bytes",
                            rank_, t.peer);
  }
  if (tag < 0) throw InvalidArgument(operation, "tags must be >= 0", rank_);
  engine_->begin({.kind = operation, .chunk_bytes = options_.chunk_bytes}, options_.timeout);
  try {
    std::vector<RequestPtr> posted;
    for (const Transfer& t : transfers)
      posted.push_back(engine_->post_tagged(t.kind, t.peer, t.buffer, t.bytes,
                                            static_cast<std::uint32_t>(tag)));
    for (const RequestPtr& r : posted) engine_->wait(r);
  } catch (const Error& e) {
    fail(e, operation);
  }
}

// ---- Communicator ----------------------------------------------------------------------

Communicator::Communicator(const LaunchInfo& launch, const Options& options)
    : impl_(std::make_unique<Impl>(launch, options)) {}

std::unique_ptr<Communicator> Communicator::from_env() {
  return std::make_unique<Communicator>(detect_launch(), Options::from_env());
}

Communicator::~Communicator() = default;

int Communicator::rank() const {
  return impl_->rank_;
}
int Communicator::size() const {
  return impl_->rendezvous_.size;
}
int Communicator::local_rank() const {
  return impl_->rendezvous_.local_rank;
}
int Communicator::local_size() const {
  return impl_->rendezvous_.local_size;
}
int Communicator::node_id() const {
  return impl_->rendezvous_.host_id;
}
int Communicator::node_count() const {
  return impl_->rendezvous_.host_count;
}
const std::string& Communicator::node_name() const {
  return impl_->rendezvous_.hosts[static_cast<std::size_t>(impl_->rank_)];
}
const Options& Communicator::options() const {
  return impl_->options_;
}
std::string Communicator::transport_name() const {
  return impl_->engine_->transport_name();
}
std::string Communicator::algorithm_name() const {
  if (find_collective(impl_->options_.algorithm, Collective::allreduce))
    return impl_->options_.algorithm;
  // "auto: recursive_doubling up to 16 KiB, halving_doubling up to 1 MiB, ring above"
  auto size_text = [](std::size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
           : bytes >= 1024     ? std::to_string(bytes >> 10) + " KiB"
                               : std::to_string(bytes) + " B";
  };
  std::string text;
  std::string current = impl_->predict("auto", 8).algorithm;
  for (std::size_t bytes = 16; bytes <= (std::size_t{1} << 30); bytes *= 2) {
    std::string next = impl_->predict("auto", bytes).algorithm;
    if (next == current) continue;
    text += current + " up to " + size_text(bytes / 2) + ", ";
    current = next;
  }
  return "auto: " + text + current + (text.empty() ? "" : " above");
}

std::string Communicator::transport_to(int peer) const {
  if (peer < 0 || peer >= size())
    throw InvalidArgument("transport_to",
                          "peer " + std::to_string(peer) + " is not a rank of this " +
                              std::to_string(size()) + "-rank communicator",
                          rank());
  return impl_->engine_->transport_to(peer);
}

std::vector<std::string> Communicator::allreduce_algorithms() {
  return algorithm_names(Collective::allreduce);
}

void Communicator::set_algorithm(const std::string& name) {
  check_algorithm(name, rank());
  impl_->set_algorithm(name);
}

AllreducePrediction Communicator::predict_allreduce(std::size_t bytes,
                                                    const std::string& algorithm) const {
  if (algorithm != "auto" && !find_collective(algorithm, Collective::allreduce))
    check_algorithm(algorithm, rank());  // names the known ones
  const Plan plan = impl_->predict(algorithm, bytes);
  return {plan.algorithm, plan.chunk_bytes, plan.seconds};
}

void Communicator::set_wire(DataType wire) {
  impl_->set_wire(wire);
}

void Communicator::set_tuning(const Tuning& tuning) {
  impl_->set_tuning(tuning);
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    throw InvalidArgument("set_timeout", "the timeout must be positive", rank());
  impl_->options_.timeout = timeout;
}

void Communicator::abort(const std::string& reason) {
  impl_->abort(reason);
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op) {
  impl_->check_buffer("allreduce", send, count, type);
  impl_->check_buffer("allreduce", recv, count, type);
  impl_->check_overlap("allreduce", send, count, recv, count, type, 0);
  impl_->run(Collective::allreduce, {send, recv, count, type, op, 0});
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DataType type, ReduceOp op) {
  const auto blocks = static_cast<std::size_t>(size());
  impl_->check_buffer("reduce_scatter", send, recv_count, type, blocks);
  impl_->check_buffer("reduce_scatter", recv, recv_count, type);
  impl_->check_overlap("reduce_scatter", send, recv_count * blocks, recv, recv_count, type,
                       -static_cast<std::ptrdiff_t>(recv_count) * rank());
  impl_->run(Collective::reduce_scatter, {send, recv, recv_count, type, op, 0});
}

void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType type) {
  const auto blocks = static_cast<std::size_t>(size());
  impl_->check_buffer("allgather", send, send_count, type);
  impl_->check_buffer("allgather", recv, send_count, type, blocks);
  impl_->check_overlap("allgather", send, send_count, recv, send_count * blocks, type,
                       static_cast<std::ptrdiff_t>(send_count) * rank());
  impl_->run(Collective::allgather, {send, recv, send_count, type, ReduceOp::sum, 0});
}

void Communicator::broadcast(void* buffer, std::size_t count, DataType type, int root) {
  impl_->check_buffer("broadcast", buffer, count, type);
  impl_->run(Collective::broadcast, {buffer, buffer, count, type, ReduceOp::sum, root});
}

void Communicator::barrier() {
  impl_->run(Collective::barrier, {nullptr, nullptr, 0, DataType::u8, ReduceOp::sum, 0});
}

void Communicator::send(const void* buffer, std::size_t bytes, int peer, int tag) {
  impl_->point_to_point("send", {{Request::Kind::send, const_cast<void*>(buffer), bytes, peer}},
                        tag);
}

void Communicator::recv(void* buffer, std::size_t bytes, int peer, int tag) {
  impl_->point_to_point("recv", {{Request::Kind::recv, buffer, bytes, peer}}, tag);
}

void Communicator::sendrecv(const void* send_buffer, std::size_t send_bytes, int destination,
                            void* recv_buffer, std::size_t recv_bytes, int source, int tag) {
  impl_->point_to_point(
      "sendrecv",
      {{Request::Kind::send, const_cast<void*>(send_buffer), send_bytes, destination},
       {Request::Kind::recv, recv_buffer, recv_bytes, source}},
      tag);
}

}  // namespace arcoll
