#include "src/core/engine.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "src/base/crc32c.hpp"
#include "src/base/env.hpp"
#include "src/base/log.hpp"
#include "src/base/reduce.hpp"
#include "src/core/call_signature.hpp"
#include "src/core/rendezvous.hpp"
#include "src/core/work_queue.hpp"
#include "transports/common/landing.hpp"
#include "transports/common/parked.hpp"

namespace arcoll {
namespace {

using net::Clock;

// While several transports serve a communicator, a wait sleeps on the one it waits for in
// slices this long, polling the others between slices; so does every wait while a transport
// of another communicator is parked (transports/common/parked.hpp).
constexpr auto kMixedWaitSlice = std::chrono::microseconds(200);
// How often a blocked wait looks for an abort() from another thread.
constexpr auto kAbortCheckSlice = std::chrono::milliseconds(5);
// Looks a wait takes, with a core per rank, before it reads the clock and waits in the
// transport: the peers usually post within moments.
constexpr int kQuickLooks = 256;

// How a wait on this thread polls first: briefly on a queue's progress thread (see
// Polling::for_host).
Waiting polling_here() {
  return WorkQueue::on_a_progress_thread() ? Waiting::poll_briefly : Waiting::poll_first;
}

// Messages up to this size take quick looks (Engine::wait): a longer one's wait is worth its
// clock read.
constexpr std::size_t kQuickLookBytes = 8192;

LinkCost link_cost(const TransportCosts& c) {
  auto per_byte = [](double gbs) { return gbs > 0 ? 1.0 / (gbs * 1e9) : 0.0; };
  return {c.latency_us * 1e-6, per_byte(c.bandwidth_gbs), per_byte(c.reduce_gbs),
          per_byte(c.cached_bandwidth_gbs), per_byte(c.cached_reduce_gbs),
          per_byte(c.small_bandwidth_gbs)};
}

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

}  // namespace

std::uint64_t corruption_fault(int rank) {
  const auto fault = env::get("ARCOLL_FAULT_CORRUPT");
  if (!fault) return 0;
  int fault_rank = -1;
  unsigned long long nth = 0;
  if (std::sscanf(fault->c_str(), "%d:%llu", &fault_rank, &nth) != 2 || nth == 0)
    throw ConfigurationError(
        "environment", "ARCOLL_FAULT_CORRUPT='" + *fault + "' must be <rank>:<n>, n >= 1", rank);
  return fault_rank == rank ? nth : 0;
}

Engine::Engine(const Rendezvous& rendezvous, const Options& options, std::uint64_t corrupt_at)
    : options_(options),
      rank_(rendezvous.rank),
      size_(rendezvous.size),
      host_of_(rendezvous.host_of),
      numa_of_(rendezvous.numa_of),
      store_(rendezvous.store.get()),
      within_host_(&transport_for(true, options.transport)),
      across_hosts_(&transport_for(false, options.transport)),
      corrupt_at_(corrupt_at) {
  TransportSetup setup;
  setup.rank = rank_;
  setup.size = size_;
  setup.options = &options_;
  setup.deadline = Clock::now() + options_.timeout;
  setup.job_id = rendezvous.job_id;
  setup.job_token = rendezvous.job_token;
  setup.store = store_;
  setup.listen_address = rendezvous.listen_address;
  setup.polling = Polling::for_host(options_.busy_poll, rendezvous.oversubscribed);
  setup.oversubscribed = rendezvous.oversubscribed;
  quick_looks_ = !setup.polling.yields;
  // Per pair of ranks, the transport the registry picks; one transport object per kind used.
  route_.assign(static_cast<std::size_t>(size_), nullptr);
  for (const TransportInfo* info : {within_host_, across_hosts_}) {
    if (!transports_.empty() && info == within_host_) continue;  // one transport for both
    setup.peers.clear();
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && (rendezvous.same_host(r, rank_) ? within_host_ : across_hosts_) == info)
        setup.peers.push_back(r);
    // A world of one still gets the transport of its host, serving no peer.
    if (setup.peers.empty() && !(size_ == 1 && info == within_host_)) continue;
    auto& transport = transports_.emplace_back(info->create(setup));
    for (int r : setup.peers) route_[static_cast<std::size_t>(r)] = transport.get();
    transport_name_ += (transport_name_.empty() ? "" : "+") + info->name;
  }
  cheap_messages_ = std::all_of(transports_.begin(), transports_.end(),
                                [](const auto& t) { return t->small_messages_cheap(); });
  layout_.ranks = size_;
  layout_.hosts = rendezvous.host_count;
  layout_.ranks_per_host = rendezvous.local_size;
  for (int r = 0; r < size_; ++r)
    if (std::count(host_of_.begin(), host_of_.end(), host_of_[static_cast<std::size_t>(r)]) !=
        rendezvous.local_size)
      layout_.ranks_per_host = 0;
  layout_.chunk_bytes = options_.chunk_bytes;
  layout_.channels = options_.channels;
  // Boards carry f32 as it is: with a narrower wire the model prices a call at the wire's
  // size, which boards do not save.
  SharedBoards* shared = transports_.size() == 1 && size_ > 1 && options_.wire == DataType::f32
                            ? transports_.front()->boards()
                            : nullptr;
  if (shared != nullptr) {
    boards_ = std::make_unique<CallBoards>(*shared, rank_, size_);
    layout_.board_capacity = boards_->capacity();
  }
  call_.chunk_bytes = options_.chunk_bytes;
  log::debug("communicator ready: " + std::to_string(size_) + " ranks, " +
             std::to_string(rendezvous.host_count) + " host(s), transport " + transport_name_ +
             (setup.polling.yields
                  ? "; waits yield between polls (more ranks than the cores they may run on)"
                  : ""));
}

Engine::~Engine() {
  take_back_parked();
  free_device_scratch();
}

void Engine::take_back_parked() const {
  if (!parked_) return;
  for (const auto& t : transports_) t->take_back();
  parked_ = false;
}

int Engine::node_of(int rank) const {
  return host_of_[static_cast<std::size_t>(rank)];
}

int Engine::numa_of(int rank) const {
  return numa_of_[static_cast<std::size_t>(rank)];
}

std::string Engine::transport_to(int peer) const {
  const Transport* t = route_[static_cast<std::size_t>(peer)];
  return t == nullptr ? "self" : std::string(t->name());
}

void Engine::apply_tuning(const Tuning& tuning) {
  const Tuning defaults = default_tuning();
  auto costs_of = [&](const std::string& transport) {
    for (const Tuning* t : {&tuning, &defaults})
      if (auto it = t->transports.find(transport); it != t->transports.end())
        return link_cost(it->second);
    return LinkCost{};
  };
  // One transport within hosts and across them: its figures within them, where measured.
  const std::string within = within_hosts_key(within_host_->name);
  layout_.intra = costs_of(within_host_ == across_hosts_ && tuning.transports.contains(within)
                               ? within
                               : within_host_->name);
  layout_.inter = costs_of(across_hosts_->name);
  // Priced for f32 calls on the communicator's wire, as irecv_reduce_send decides.
  const bool forwarded = unstaged(options_.wire);
  for (const auto& t : transports_) {
    if (t->name() == within_host_->name) {
      layout_.intra.forwards = forwarded && t->forwards();
      layout_.intra.fans_out = t->fans_out();
      layout_.intra.cheap_messages = t->small_messages_cheap();
      reads_reductions_across_within_hosts_ = t->reads_reductions_across();
    }
    if (t->name() == across_hosts_->name) {
      layout_.inter.forwards = forwarded && t->forwards();
      layout_.inter.cheap_messages = t->small_messages_cheap();
    }
  }
  for (LinkCost* link : {&layout_.intra, &layout_.inter})
    set_cache_window(*link, tuning.last_level_cache_bytes, layout_.ranks_per_host);
}

void Engine::begin(const Call& call, std::chrono::milliseconds timeout) {
  take_back_parked();
  call_ = call;
  pacing_asked_ = false;
  tag_ = call.sequence == 0
             ? 0
             : kCollectiveTagBit | static_cast<std::uint32_t>(call.sequence & kSequenceMask);
  timeout_ = timeout;
  in_collective_ = call.sequence != 0;
  root_check_open_ = false;
  if (in_collective_) last_collective_ = call.sequence;
  deadline_ = Clock::time_point::max();  // set by the call's first wait that must block
  // What a failed call left; the communicator is broken then anyway. Cleared only when not
  // empty: clearing an empty map still wipes its buckets, a memset on every small call.
  if (!staged_.empty()) staged_.clear();
  unforwarded_.clear();
  if (boards_ && call.sequence != 0) boards_->enter(call.sequence, call.signature, call.root);
}

void Engine::end() {
  for (const auto& t : transports_) {
    t->leave_call(timeout_);
    const PeerFailedCall failed = t->peer_failed_call();
    if (failed.call > call_.sequence) continue;
    // The reason comes before the number (shm: in the ring; tcp: the frame that carried it).
    t->progress(Clock::now(), Waiting::sleep);
    if (auto failure = t->failure()) raise(failure);
    throw PeerError(call_name(),
                    "rank " + std::to_string(failed.rank) + " failed in collective #" +
                        std::to_string(failed.call) + " (its reason did not arrive)",
                    rank_, failed.rank);
  }
  for (const auto& t : transports_) parked_ = t->park() || parked_;
  in_collective_ = false;
}

int Engine::root_check_on_boards() {
  std::optional<CallBoards::Disagreement> other;
  int other_root = 0;
  const int missing = boards_->first_not_entered_alike(other, other_root);
  if (other)
    throw InvalidArgument(call_name(),
                          describe_mismatch(other->rank, other->signature, call_.signature,
                                            other_root == call_.root
                                                ? "on the shared boards"
                                                : "on the shared boards: it names root " +
                                                      std::to_string(other_root) +
                                                      ", this rank root " +
                                                      std::to_string(call_.root)),
                          rank_, other->rank);
  return missing;
}

void Engine::finish_root_check_on_boards() {
  if (!root_check_open_) return;
  int missing = 0;
  await_on_boards([&] { return (missing = root_check_on_boards()) < 0; }, [&] { return missing; },
                  [] {}, "entering this call");
  root_check_open_ = false;
}

std::string Engine::call_name() const {
  return call_.sequence != 0 ? std::string(call_.kind) + " #" + std::to_string(call_.sequence)
                             : std::string(call_.kind);
}

std::uint32_t Engine::collective_tag(int channel) const {
  if (channel < 0 || channel >= kMaxChannels)
    throw InternalError(call_name(), "message channel " + std::to_string(channel) +
                                         " outside 0.." + std::to_string(kMaxChannels - 1));
  return tag_ | static_cast<std::uint32_t>(channel) << kChannelShift;
}

RequestPtr Engine::isend(int peer, const void* buffer, std::size_t bytes, int channel) {
  return post(Request::Kind::send, peer, const_cast<void*>(buffer), bytes, collective_tag(channel),
              {});
}

RequestPtr Engine::irecv(int peer, void* buffer, std::size_t bytes, int channel) {
  return post(Request::Kind::recv, peer, buffer, bytes, collective_tag(channel), {});
}

RequestPtr Engine::irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                                DataType type, ReduceOp op, int channel) {
  return post(Request::Kind::recv, peer, buffer, count * size_of(type), collective_tag(channel),
              Request::Landing{with, type, op, type});
}

RequestPtr Engine::irecv_reduce_send(int peer, void* buffer, const void* with, std::size_t count,
                                     DataType type, ReduceOp op, int channel,
                                     int forward_channel) {
  if (with == nullptr)
    throw InternalError(call_name(), "irecv_reduce_send needs the elements to reduce with");
  const std::size_t bytes = count * size_of(type);
  Transport* t = route_[static_cast<std::size_t>(peer)];
  // Staged messages are sent on by the engine, once whole.
  if (t != nullptr && t->forwards() && bytes > 0 && unstaged(call_.wire) &&
      call_.memory == nullptr) {
    RequestPtr receive =
        make_request(Request::Kind::recv, peer, buffer, bytes, collective_tag(channel),
                     Request::Landing{with, type, op, type});
    receive->forward = make_request(Request::Kind::send, peer, buffer, bytes,
                                    collective_tag(forward_channel), {});
    t->post(receive);
    return receive;
  }
  RequestPtr receive = irecv_reduce(peer, buffer, with, count, type, op, channel);
  unforwarded_.push_back({receive, buffer, bytes, forward_channel});
  return receive;
}

RequestPtr Engine::start(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                         std::uint32_t tag, const std::optional<Request::Landing>& landing) {
  RequestPtr request = make_request(kind, peer, buffer, bytes, tag, landing);
  route_[static_cast<std::size_t>(peer)]->post(request);
  return request;
}

RequestPtr Engine::make_request(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                                std::uint32_t tag, const std::optional<Request::Landing>& landing) {
  RequestPtr request = fresh_request();
  request->kind = kind;
  request->peer = peer;
  request->tag = tag;
  request->signature = call_.signature;
  request->buffer = buffer;
  request->bytes = bytes;
  request->memory = bytes != 0 ? memory_of(buffer) : nullptr;
  request->landing = landing;
  request->streaming_stores = call_.streaming_stores;
  request->receivers = call_.receivers;
  request->held = kind == Request::Kind::send && (tag & kCheckTagBit) != 0 && holds_root_sends_;
  return request;
}

RequestPtr Engine::fresh_request() {
  // Requests are mostly let go in the order they were made, so the next few past the cursor
  // are the likely free ones; a call with many messages in flight grows the pool instead.
  constexpr std::size_t kLooks = 4;
  constexpr std::size_t kPoolLimit = 256;
  for (std::size_t look = 0; look < std::min(kLooks, requests_.size()); ++look) {
    RequestPtr& pooled = requests_[request_cursor_];
    if (++request_cursor_ == requests_.size()) request_cursor_ = 0;
    if (pooled.use_count() == 1) {
      // Counted before it is made anew where it lies: the count's atomic add waits for every
      // store before it, and after the stores that remake the request it stalled. Made by
      // default-initialisation, as every member has an initializer: not zeroed first.
      RequestPtr request = pooled;
      std::destroy_at(request.get());
      ::new (static_cast<void*>(request.get())) Request;
      return request;
    }
  }
  auto request = std::make_shared<Request>();
  if (requests_.size() < kPoolLimit) requests_.push_back(request);
  return request;
}

std::vector<char> Engine::staging_buffer(std::size_t bytes) {
  std::vector<char> staging;
  if (!staging_free_.empty()) {
    staging = std::move(staging_free_.back());
    staging_free_.pop_back();
  }
  staging.resize(bytes);
  return staging;
}

bool Engine::send_now(int peer, std::uint32_t tag, const void* buffer, std::size_t bytes,
                      bool overwritten) {
  // A checked send takes a trailer (post()); which sizes go at once is the transport's call.
  if (options_.checksum) return false;
  return route_[static_cast<std::size_t>(peer)]->send_now(peer, tag, call_.signature, buffer, bytes,
                                                          overwritten);
}

bool Engine::receive_now(int peer, std::uint32_t tag, void* buffer, std::size_t bytes) {
  if (options_.checksum) return false;
  return route_[static_cast<std::size_t>(peer)]->receive_now(peer, tag, call_.signature, buffer,
                                                             bytes);
}

RequestPtr Engine::post(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                        std::uint32_t tag, std::optional<Request::Landing> landing) {
  const bool narrowed = call_.wire != DataType::f32;
  // A narrowed call's f32 elements travel in 16 bits: receives widen them as they land.
  std::size_t wire_bytes = bytes;
  if (narrowed) {
    wire_bytes = bytes / sizeof(float) * 2;
    if (kind == Request::Kind::recv) {
      if (!landing) landing = Request::Landing{nullptr, DataType::f32, ReduceOp::sum, DataType::f32};
      landing->wire = call_.wire;
    }
  }
  const DeviceMemoryInfo* copied_from =
      kind == Request::Kind::send ? sent_from_host_copy(peer, buffer, bytes) : nullptr;
  const bool staged_send = kind == Request::Kind::send && (narrowed || copied_from != nullptr);
  if (!staged_send && !options_.checksum) return start(kind, peer, buffer, wire_bytes, tag, landing);
  // A checked receive that lands as more than a copy lands only once checked: into staging
  // first.
  Staged staged;
  const bool staged_receive = kind == Request::Kind::recv && landing.has_value();
  if (copied_from != nullptr) {
    staged.staging = staging_buffer(bytes);
    copied_from->to_host(staged.staging.data(), buffer, bytes);
  } else if (staged_send) {
    staged.staging = staging_buffer(wire_bytes);
    kernels::narrow(staged.staging.data(), call_.wire, static_cast<const float*>(buffer),
                    bytes / sizeof(float));
  } else if (staged_receive) {
    staged.staging = staging_buffer(wire_bytes);
    staged.destination = buffer;
    staged.landing = landing;
  }
  void* wire = staged.staging.empty() ? buffer : staged.staging.data();
  RequestPtr request = start(kind, peer, wire, wire_bytes, tag,
                             staged_receive ? std::nullopt : landing);
  Staged& entry = staged_.emplace(request.get(), std::move(staged)).first->second;
  if (options_.checksum) {
    if (kind == Request::Kind::send) entry.checksum = crc32c(wire, wire_bytes);
    entry.trailer = start(kind, peer, &entry.checksum, sizeof entry.checksum, tag, {});
  }
  return request;
}

void Engine::verify_checksum(const Request& request, std::uint32_t sent) {
  auto* bytes = static_cast<unsigned char*>(request.buffer);
  if (request.bytes > 0 && ++checked_messages_ == corrupt_at_) bytes[request.bytes / 2] ^= 0x10;
  const std::uint32_t received = crc32c(bytes, request.bytes);
  if (received == sent) return;
  throw ProtocolError(call_name(),
                      "checksum mismatch (ARCOLL_CHECKSUM): a message of " +
                          std::to_string(request.bytes) + " B on the link from rank " +
                          std::to_string(request.peer) + " to rank " + std::to_string(rank_) +
                          " over " + transport_to(request.peer) + " arrived corrupted (CRC32C " +
                          hex32(received) + ", sent as " + hex32(sent) + ")",
                      rank_, request.peer);
}

void Engine::finish_staged(const Request& request) {
  if (staged_.empty()) return;  // the usual case: no lookup
  auto it = staged_.find(&request);
  if (it == staged_.end()) return;
  Staged& staged = it->second;
  if (staged.trailer) {
    wait(staged.trailer);
    if (request.kind == Request::Kind::recv) verify_checksum(request, staged.checksum);
  }
  if (staged.destination != nullptr) {
    Request checked;
    checked.buffer = staged.destination;
    checked.landing = staged.landing;
    checked.streaming_stores = call_.streaming_stores;
    transport::land(checked, 0, staged.staging.data(), request.bytes);
  }
  if (staged.staging.capacity() > 0) staging_free_.push_back(std::move(staged.staging));
  staged_.erase(it);
}

void Engine::raise(const std::exception_ptr& failure) const {
  try {
    std::rethrow_exception(failure);
  } catch (const CallMismatch& mismatch) {
    throw InvalidArgument(call_name(), describe(mismatch), rank_, mismatch.peer);
  }
}

template <class WaitingFor>
net::Clock::time_point Engine::check_blocked(int peer, const WaitingFor& waiting_for) {
  if (auto failure = transport_failure()) raise(failure);
  if (abort_requested()) throw PeerError(call_name(), abort_text(), rank_);
  if (root_check_open_) root_check_on_boards();
  const Clock::time_point now = Clock::now();
  transport::ParkingSpot::move_parked(now);
  if (deadline_ == Clock::time_point::max()) deadline_ = now + timeout_;
  if (now < deadline_) return now;
  throw TimeoutError(call_name(),
                     "no progress within " + seconds_text(timeout_) +
                         " (ARCOLL_TIMEOUT) waiting for " + waiting_for() + ": rank " +
                         std::to_string(peer) +
                         " is not responding (hung, stopped, or not in this call)" +
                         ranks_absent_from_call(),
                     rank_, peer);
}

void Engine::wait(const RequestPtr& request) {
  if (quick_looks_ && transports_.size() == 1 && request->bytes <= kQuickLookBytes) {
    Transport* own = route_[static_cast<std::size_t>(request->peer)];
    for (int look = 0; !request->done && look < kQuickLooks && own->poll(); ++look) {
    }
  }
  while (!request->done) {
    const Clock::time_point now =
        check_blocked(request->peer, [&] { return "the " + request->describe(); });
    Transport* own = route_[static_cast<std::size_t>(request->peer)];
    if (transports_.size() == 1) {
      const auto slice = transport::ParkingSpot::any_parked() ? kMixedWaitSlice : kAbortCheckSlice;
      own->progress(std::min(deadline_, now + slice), polling_here());
      continue;
    }
    for (const auto& t : transports_)
      if (t.get() != own) t->progress(now, polling_here());
    own->progress(std::min(deadline_, Clock::now() + kMixedWaitSlice), polling_here());
  }
  if (request->error) raise(request->error);
  finish_staged(*request);
  if (request->forward) {
    wait(request->forward);
    return;
  }
  if (unforwarded_.empty()) return;  // the usual case: no lookup
  auto it = std::find_if(unforwarded_.begin(), unforwarded_.end(),
                         [&](const Unforwarded& u) { return u.receive == request; });
  if (it == unforwarded_.end()) return;
  const Unforwarded u = *it;
  unforwarded_.erase(it);
  wait(isend(request->peer, u.buffer, u.bytes, u.forward_channel));
}

std::size_t Engine::board_capacity() const {
  return layout_.board_capacity;
}

std::span<const std::byte* const> Engine::exchange_on_boards(const void* data,
                                                             std::size_t bytes) {
  if (!boards_ || bytes > board_capacity())
    throw InternalError(call_name(), std::to_string(bytes) + " B do not fit on the boards (" +
                                         std::to_string(board_capacity()) + " B)");
  boards_->post(data, bytes, call_.sequence, call_.signature);
  auto throw_if_in_other_call = [&] {
    auto other = boards_->disagreement();
    if (!other) return;
    const std::string in = std::to_string(other->sequence);
    const std::string where =
        other->sequence == call_.sequence ? "on the shared boards"
        : other->posted ? "on the shared boards: its part is of call #" + in
                        : "on the shared boards: it went on to call #" + in +
                              " without posting its part of this one";
    throw InvalidArgument(call_name(),
                          describe_mismatch(other->rank, other->signature, call_.signature, where),
                          rank_, other->rank);
  };
  await_on_boards([this] { return boards_->all_posted(); },
                  [this] { return boards_->first_missing(); }, throw_if_in_other_call,
                  "posting its part on the shared boards");
  // await_on_boards() threw for any part of another signature: the roots agree.
  if (size_ <= kSignatureRoots) root_check_open_ = false;
  return boards_->parts();
}

template <class Ready, class Missing, class ThrowIfOther>
void Engine::await_on_boards(Ready ready, Missing first_missing, ThrowIfOther throw_if_other,
                             const char* awaited) {
  bool done = ready();
  for (int look = 0; !done && quick_looks_ && look < kQuickLooks; ++look) done = ready();
  // A peer's call is looked at only once a wait took a while: reading it costs a cache line.
  for (bool first = true; !done; first = false, done = ready()) {
    const int missing = first_missing();
    const Clock::time_point now =
        check_blocked(missing, [&] { return "rank " + std::to_string(missing) + " " + awaited; });
    if (boards_->shared().departed(missing))
      throw PeerError(call_name(),
                      "rank " + std::to_string(missing) + " destroyed its communicator before " +
                          awaited,
                      rank_, missing);
    if (!first) throw_if_other();
    boards_->shared().await_boards(ready, std::min(deadline_, now + kAbortCheckSlice),
                                   polling_here());
  }
  throw_if_other();
}

void Engine::progress(Clock::time_point until, Waiting waiting) {
  if (waiting == Waiting::poll_first) waiting = polling_here();
  if (auto failure = transport_failure()) raise(failure);
  if (abort_requested()) throw PeerError(call_name(), abort_text(), rank_);
  transport::ParkingSpot::move_parked(Clock::now());
  // Only the last transport sleeps: a message on another does not wake it.
  if (transports_.size() > 1 || transport::ParkingSpot::any_parked())
    until = std::min(until, Clock::now() + kMixedWaitSlice);
  for (const auto& t : transports_)
    t == transports_.back() ? t->progress(until, waiting) : t->progress(Clock::now(), waiting);
}

void Engine::wake() noexcept {
  for (const auto& t : transports_) t->wake();
}

bool Engine::test(const RequestPtr& request) {
  if (!request->done) {
    if (auto failure = transport_failure()) raise(failure);
    return false;
  }
  if (request->error) raise(request->error);
  finish_staged(*request);
  return !request->forward || test(request->forward);
}

std::string Engine::ranks_absent_from_call() {
  if (call_.sequence == 0 || store_ == nullptr) return "";
  // The ranks waiting in the same call time out within moments of each other: each says so
  // and looks for the others' word for this long.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  const std::string prefix = "timed-out/" + std::to_string(call_.sequence) + "/";
  std::string absent;
  try {
    store_->set(prefix + std::to_string(rank_), "", until);
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && !store_->get(prefix + std::to_string(r), until))
        absent += (absent.empty() ? "" : ", ") + std::to_string(r);
  } catch (const Error&) {
    return "";  // the store went with rank 0
  }
  return absent.empty() ? "" : "; ranks not waiting in this call: " + absent;
}

void* Engine::scratch(std::size_t bytes, int slot) {
  if (call_.memory != nullptr) return device_scratch(bytes, slot);
  if (scratch_.size() <= static_cast<std::size_t>(slot))
    scratch_.resize(static_cast<std::size_t>(slot) + 1);
  auto& buffer = scratch_[static_cast<std::size_t>(slot)];
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

void Engine::round_to_wire(void* data, std::size_t count, DataType type) {
  if (rounds_to_wire(type)) round_through_wire(data, count, call_.wire);
}

bool Engine::rounds_to_wire(DataType type) const {
  return call_.wire != DataType::f32 && type == DataType::f32;
}

void Engine::round_through_wire(void* data, std::size_t count, DataType wire) {
  // In cache-sized blocks through a buffer kept across calls: no allocation per round.
  constexpr std::size_t kBlock = 16 * 1024;
  wire_block_.resize(kBlock);
  auto* values = static_cast<float*>(data);
  for (std::size_t i = 0; i < count; i += kBlock) {
    const std::size_t n = std::min(kBlock, count - i);
    kernels::narrow(wire_block_.data(), wire, values + i, n);
    kernels::widen(values + i, wire_block_.data(), wire, n);
  }
}

std::exception_ptr Engine::transport_failure() const {
  take_back_parked();
  for (const auto& t : transports_)
    if (auto f = t->failure()) return f;
  return nullptr;
}

void Engine::fail(const Error& e, const std::string& operation) {
  take_back_parked();
  for (const auto& t : transports_) {
    log::debug(operation + " failed; " + std::string(t->name()) + " transfers pending:\n" +
               t->pending_state());
    t->abort(e.what(), failed_call());
  }
  throw_error(e.code(), operation, e.message(), rank_, e.peer());
}

void Engine::abort_links(const std::string& reason) {
  take_back_parked();
  for (const auto& t : transports_) t->abort(reason, failed_call());
}

bool Engine::request_abort(const std::string& reason) {
  std::lock_guard lock(abort_mutex_);
  if (abort_requested_.load()) return false;
  abort_reason_ = reason;
  abort_requested_.store(true, std::memory_order_release);
  return true;
}

std::string Engine::abort_text() const {
  std::lock_guard lock(abort_mutex_);
  return "abort() called: " + abort_reason_;
}

}  // namespace arcoll
