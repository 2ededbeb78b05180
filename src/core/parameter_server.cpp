// The parameter server: setting up, the worker side and the loop (the protocol and the state
// they share: parameter_server_impl.hpp; the server side: parameter_server_serving.cpp).
#include "arcoll/parameter_server.hpp"

#include <algorithm>
#include <cstring>
#include <set>

#include "src/core/parameter_server_impl.hpp"
#include "src/core/rendezvous.hpp"

namespace arcoll {

using namespace ps;  // the protocol's names, shared by the two halves

namespace ps {

const char* op_name(Op op) {
  switch (op) {
    case Op::init:
      return "register";
    case Op::push:
      return "push";
    case Op::pull:
      return "pull";
    case Op::push_pull:
      return "push_pull";
    case Op::barrier:
      return "barrier";
    case Op::finish:
      return "finish";
    case Op::agree:
      return "register";
  }
  return "?";
}

}  // namespace ps

// ---- setting up -----------------------------------------------------------------------------

ParameterServer::Impl::Impl(Communicator& comm, const ParameterServerOptions& options)
    : options_(options), timeout_(comm.options().timeout) {
  const int size = comm.size();
  rank_ = comm.rank();
  for (int r : options.server_ranks)
    if (r < 0 || r >= size)
      throw InvalidArgument(
          kOperation,
          "server rank " + std::to_string(r) + " is not a rank of " + std::to_string(size), rank_);
  std::set<int> dedicated(options.server_ranks.begin(), options.server_ranks.end());
  if (dedicated.size() != options.server_ranks.size())
    throw InvalidArgument(kOperation, "a server rank is named twice", rank_);
  for (int r = 0; r < size; ++r)
    if (!dedicated.count(r)) workers_.push_back(r);
  if (workers_.empty())
    throw InvalidArgument(kOperation, "every rank is a server: no workers", rank_);
  servers_ = dedicated.empty() ? workers_ : std::vector<int>(dedicated.begin(), dedicated.end());
  is_server_ = std::find(servers_.begin(), servers_.end(), rank_) != servers_.end();
  for (std::size_t w = 0; w < workers_.size(); ++w)
    if (workers_[w] == rank_) worker_index_ = static_cast<int>(w);
  if (options.piece_bytes == 0)
    throw InvalidArgument(kOperation, "the piece size must be positive", rank_);
  if (options.consistency == Consistency::ssp && options.staleness < 0)
    throw InvalidArgument(kOperation, "ssp's staleness must be 0 or more", rank_);
  server_load_.assign(servers_.size(), 0);

  comm_ = comm.duplicate();
  engine_ = comm_->impl_->engine_.get();
  engine_->begin({.kind = kOperation}, timeout_);
  if (is_server_)
    for (int w : workers_) post_header_receive(w);
  // Workers (and colocated servers) run the loop on a thread of their own; dedicated servers
  // run it in serve().
  if (worker_index_ >= 0) thread_ = std::thread([this] { run_loop(); });
}

ParameterServer::Impl::~Impl() {
  if (worker_index_ >= 0) {
    try {
      finish();
    } catch (...) {
    }
    // A colocated server serves until every worker has finished (or the job failed).
    thread_.join();
  }
}

std::vector<ParameterServer::Piece> ParameterServer::Impl::pieces(std::uint64_t key) const {
  auto& self = const_cast<Impl&>(*this);
  std::lock_guard lock(self.mutex_);
  auto it = keys_.find(key);
  if (it == keys_.end())
    throw InvalidArgument(kOperation, "key " + std::to_string(key) + " is not registered", rank_);
  return it->second.pieces;
}

// ---- worker side ----------------------------------------------------------------------------

void ParameterServer::Impl::register_tensor(std::uint64_t key, std::size_t count, DataType type,
                                            const void* initial) {
  if (worker_index_ < 0)
    throw InvalidArgument("register", "rank " + std::to_string(rank_) + " is a dedicated server",
                          rank_);
  if (options_.rule == ServerRule::sgd && type != DataType::f32)
    throw InvalidArgument(
        "register", "the sgd rule holds f32 weights, not " + std::string(to_string(type)), rank_);
  if (count > 0 && initial == nullptr && options_.rule == ServerRule::sgd && worker_index_ == 0)
    throw InvalidArgument("register", "the sgd rule needs worker 0's initial weights", rank_);
  {
    std::lock_guard lock(mutex_);
    if (keys_.count(key))
      throw InvalidArgument("register", "key " + std::to_string(key) + " is registered already",
                            rank_);
    KeyInfo info;
    info.count = count;
    info.type = type;
    info.registration = keys_.size() + 1;
    // Pieces go to the server with the fewest bytes so far (the lowest index on a tie): every
    // worker registers the same keys in the same order, so all assign alike.
    const std::size_t per_piece = piece_elements(options_.piece_bytes, type);
    for (std::size_t offset = 0; offset < count; offset += per_piece) {
      const std::size_t n = std::min(per_piece, count - offset);
      const auto least = std::min_element(server_load_.begin(), server_load_.end());
      *least += n * size_of(type);
      info.pieces.push_back(
          {servers_[static_cast<std::size_t>(least - server_load_.begin())], offset, n});
    }
    keys_[key] = std::move(info);
  }
  // The workers agree on what they register before any piece is set up: a worker that
  // registered another key would otherwise wait for its pieces until the timeout.
  submit(Op::agree, key, nullptr, nullptr)->wait();
  submit(Op::init, key, worker_index_ == 0 ? initial : nullptr, nullptr)->wait();
}

WorkPtr ParameterServer::Impl::submit(Op op, std::uint64_t key, const void* send, void* recv) {
  auto work = std::make_shared<QueuedWork>(
      std::string(op_name(op)) +
      (op == Op::barrier || op == Op::finish ? "" : " of key " + std::to_string(key)));
  {
    std::lock_guard lock(mutex_);
    if (failure_) {
      work->complete(failure_);
      return work;
    }
    if (worker_index_ < 0)
      throw InvalidArgument(op_name(op), "rank " + std::to_string(rank_) + " is a dedicated server",
                            rank_);
    for (const void* buffer : {send, static_cast<const void*>(recv)})
      if (const DeviceMemoryInfo* device = device_memory_of(buffer))
        throw InvalidArgument(op_name(op),
                              "the parameter server takes host buffers; this one is " +
                                  device->name + " device memory",
                              rank_);
    if (finishing_ && op != Op::finish)
      throw InvalidArgument(op_name(op), "this worker has finished", rank_);
    if (op != Op::barrier && op != Op::finish && op != Op::init && op != Op::agree) {
      if (!keys_.count(key))
        throw InvalidArgument(op_name(op), "key " + std::to_string(key) + " is not registered",
                              rank_);
      const KeyInfo& info = keys_.at(key);
      if (info.count > 0 &&
          ((op != Op::pull && send == nullptr) || (op != Op::push && recv == nullptr)))
        throw InvalidArgument(op_name(op), "null buffer for key " + std::to_string(key), rank_);
    }
    calls_.push_back({op, key, static_cast<const char*>(send), static_cast<char*>(recv), work});
  }
  changed_.notify_all();
  // The loop may sleep in the transports: it says so before its last look at calls_, and we
  // look at its word after adding ours, so one of the two sees the other.
  if (waiting_in_transports_.load()) engine_->wake();
  return work;
}

void ParameterServer::Impl::finish() {
  {
    std::lock_guard lock(mutex_);
    if (finishing_) return;
  }
  WorkPtr done = submit(Op::finish, 0, nullptr, nullptr);
  {
    std::lock_guard lock(mutex_);
    finishing_ = true;
  }
  if (waiting_in_transports_.load()) engine_->wake();  // it may end now
  done->wait();
}

RequestPtr ParameterServer::Impl::message(Request::Kind kind, int peer, void* buffer,
                                          std::size_t bytes, std::uint32_t tag) {
  if (peer != rank_) return engine_->post_tagged(kind, peer, buffer, bytes, tag);
  auto request = std::make_shared<Request>();
  request->kind = kind;
  request->peer = peer;
  request->tag = tag;
  request->buffer = buffer;
  request->bytes = bytes;
  auto land = [&](RequestPtr receive, const char* data, std::size_t size) {
    if (size != receive->bytes)
      receive->error = make_error(ErrorCode::internal, kOperation,
                                  "a message to itself of " + std::to_string(size) +
                                      " bytes met a receive of " + std::to_string(receive->bytes),
                                  rank_, rank_);
    else if (size > 0)
      std::memcpy(receive->buffer, data, size);
    receive->transferred = size;
    receive->done = true;
  };
  if (kind == Request::Kind::send) {
    auto& waiting = self_receives_[tag];
    if (!waiting.empty()) {
      land(waiting.front(), static_cast<const char*>(buffer), bytes);
      waiting.pop_front();
    } else {
      self_sent_[tag].emplace_back(static_cast<const char*>(buffer),
                                   static_cast<const char*>(buffer) + bytes);
    }
    request->transferred = bytes;
    request->done = true;
  } else {
    auto& sent = self_sent_[tag];
    if (!sent.empty()) {
      land(request, sent.front().data(), sent.front().size());
      sent.pop_front();
    } else {
      self_receives_[tag].push_back(request);
    }
  }
  return request;
}

void ParameterServer::Impl::post(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                                 std::uint32_t tag, std::function<void()> done, std::string what,
                                 std::shared_ptr<const void> keep) {
  RequestPtr request = message(kind, peer, buffer, bytes, tag);
  inflight_.push_back({std::move(request), std::move(done), std::move(keep),
                       Clock::now() + timeout_, std::move(what)});
}

// Turns one user call into its messages. The Work completes when the last of them has.
void ParameterServer::Impl::issue(Call call) {
  const Op op = call.op;
  std::vector<std::pair<int, Header>> headers;             // (server, header)
  std::vector<std::pair<std::size_t, std::size_t>> spans;  // (offset bytes, bytes) per header
  {
    std::lock_guard lock(mutex_);
    if (op == Op::barrier || op == Op::finish) {
      for (int s : servers_) {
        Header h;
        h.op = static_cast<std::uint32_t>(op);
        h.clock = op == Op::barrier ? ++barrier_count_ : 0;
        headers.emplace_back(s, h);
        spans.emplace_back(0, 0);
      }
    } else if (op == Op::agree) {
      const KeyInfo& info = keys_.at(call.key);
      Header h;
      h.op = static_cast<std::uint32_t>(op);
      h.key = call.key;
      h.clock = info.registration;
      h.count = info.count;
      h.type = static_cast<std::uint32_t>(info.type);
      headers.emplace_back(servers_.front(), h);
      spans.emplace_back(0, 0);
    } else {
      KeyInfo& info = keys_.at(call.key);
      if (op == Op::push || op == Op::push_pull) ++info.clock;
      for (std::size_t p = 0; p < info.pieces.size(); ++p) {
        const Piece& piece = info.pieces[p];
        Header h;
        h.op = static_cast<std::uint32_t>(op);
        h.piece = static_cast<std::uint32_t>(p);
        h.key = call.key;
        h.clock = info.clock;
        h.count = info.count;
        h.type = static_cast<std::uint32_t>(info.type);
        h.with_values = op == Op::init && call.send != nullptr;
        headers.emplace_back(piece.server, h);
        spans.emplace_back(piece.offset * size_of(info.type), piece.count * size_of(info.type));
      }
    }
  }
  auto remaining = std::make_shared<std::size_t>(0);
  auto work = call.work;
  auto one_done = [remaining, work] {
    if (--*remaining == 0) work->complete(nullptr);
  };
  const bool replies = op == Op::init || op == Op::pull || op == Op::push_pull ||
                      op == Op::barrier || op == Op::agree;
  auto acks = std::make_shared<std::vector<std::uint64_t>>(headers.size());
  for (std::size_t i = 0; i < headers.size(); ++i) {
    auto& [server, h] = headers[i];
    const auto [offset, bytes] = spans[i];
    const std::string what = std::string(op_name(op)) + " of " + key_text(h.key, h.piece) +
                             " with server rank " + std::to_string(server);
    if (replies) {
      h.request = next_request_++ & 0x0fffffffu;
      const bool data_reply = op == Op::pull || op == Op::push_pull;
      void* into = data_reply ? static_cast<void*>(call.recv + offset) : &(*acks)[i];
      ++*remaining;
      post(Request::Kind::recv, server, into, data_reply ? bytes : sizeof(std::uint64_t),
           kReplyTagBase + h.request, one_done, what + ": its reply", acks);
    }
    auto header = std::make_shared<Bytes>(sizeof(Header));
    std::memcpy(header->data(), &h, sizeof h);
    ++*remaining;
    post(Request::Kind::send, server, header->data(), header->size(), kHeaderTag, one_done, what,
         header);
    if (carries_payload(h)) {
      ++*remaining;
      post(Request::Kind::send, server, const_cast<char*>(call.send) + offset, bytes, kPayloadTag,
           one_done, what + ": its data");
    }
  }
  if (*remaining == 0) {
    work->complete(nullptr);
    return;
  }
  open_works_.push_back(work);
}

// ---- the loop -------------------------------------------------------------------------------

bool ParameterServer::Impl::server_done() const {
  if (!is_server_) return true;
  for (int w : workers_) {
    auto it = clients_.find(w);
    if (it == clients_.end() || !it->second.finished) return false;
  }
  return true;
}

bool ParameterServer::Impl::step() {
  bool moved = false;
  {
    std::deque<Call> calls;
    {
      std::lock_guard lock(mutex_);
      calls.swap(calls_);
    }
    for (Call& c : calls) issue(std::move(c));
    moved = !calls.empty();
  }
  engine_->progress(Clock::now(), Waiting::poll_first);
  if (is_server_) {
    for (int w : workers_) {
      Client& c = clients_[w];
      // One worker's messages in order: the payload before the next header.
      while (!c.finished) {
        if (c.payload_request) {
          if (!engine_->test(c.payload_request)) break;
          c.payload_request.reset();
          apply(w, c.header, c.payload);
        } else if (c.header_request) {
          if (!engine_->test(c.header_request)) break;
          c.header_request.reset();
          handle_header(w);
          if (c.payload_request) continue;
        }
        moved = true;
        if (!c.finished) post_header_receive(w);
      }
    }
    check_stalls();
  }
  const auto now = Clock::now();
  for (std::size_t i = 0; i < inflight_.size();) {
    InFlight& f = inflight_[i];
    if (engine_->test(f.request)) {
      auto done = std::move(f.done);
      inflight_[i] = std::move(inflight_.back());
      inflight_.pop_back();
      done();
      moved = true;
      continue;
    }
    if (now > f.deadline)
      throw TimeoutError(kOperation,
                         f.what + ": no progress within " + seconds_text(timeout_) +
                             " (ARCOLL_TIMEOUT); rank " + std::to_string(f.request->peer) +
                             " is not responding (hung, stopped, or gone)",
                         rank_, f.request->peer);
    ++i;
  }
  std::erase_if(open_works_, [](const std::shared_ptr<QueuedWork>& w) { return w->test(); });
  if (moved) last_progress_ = now;
  return moved;
}

void ParameterServer::Impl::run_loop() {
  try {
    for (;;) {
      const bool moved = step();
      bool idle = false;
      {
        std::lock_guard lock(mutex_);
        idle = calls_.empty() && inflight_.empty() && open_works_.empty();
        // It ends once this rank's worker (if any) has finished and its server share (if any)
        // is no longer needed.
        if (idle && (worker_index_ < 0 || finishing_) && server_done()) break;
      }
      if (moved) continue;
      // Nothing moved. A worker with nothing expected waits for its next call. Otherwise the
      // transports sleep until a message or this rank's next call (submit wakes them) comes:
      // after a short spin while messages keep coming, for a long slice once they have
      // stopped (an abort from another thread is seen at the next), so that an idle server
      // costs its host no core.
      if (inflight_.empty() && !is_server_) {
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, std::chrono::milliseconds(1),
                          [&] { return !calls_.empty() || finishing_; });
      } else {
        waiting_in_transports_.store(true);
        bool called;
        {
          std::lock_guard lock(mutex_);
          called = !calls_.empty();
        }
        const bool busy = Clock::now() - last_progress_ < std::chrono::milliseconds(2);
        if (!called && busy)
          engine_->progress(Clock::now() + std::chrono::microseconds(10), Waiting::poll_first);
        else if (!called)
          engine_->progress(Clock::now() + std::chrono::milliseconds(20), Waiting::sleep);
        waiting_in_transports_.store(false);
      }
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

void ParameterServer::Impl::fail(std::exception_ptr error) {
  std::string text = "parameter server failed";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    text = e.what();
  } catch (...) {
  }
  {
    std::lock_guard lock(mutex_);
    failure_ = error;
    for (Call& c : calls_) c.work->complete(error);
    calls_.clear();
  }
  for (auto& w : open_works_) w->complete(error);
  open_works_.clear();
  // The peers fail at once instead of waiting for this rank until their deadline.
  engine_->abort_links(text);
}

void ParameterServer::Impl::rethrow_failure() const {
  std::rethrow_exception(failure_);
}

void ParameterServer::Impl::serve() {
  if (worker_index_ >= 0)
    throw InvalidArgument("serve",
                          "rank " + std::to_string(rank_) +
                              " is a worker: its share is "
                              "served by a thread of its own",
                          rank_);
  run_loop();
  std::lock_guard lock(mutex_);
  if (failure_) rethrow_failure();
}

// ---- the facade -----------------------------------------------------------------------------

ParameterServer::ParameterServer(Communicator& comm, const ParameterServerOptions& options)
    : impl_(std::make_unique<Impl>(comm, options)) {}
ParameterServer::~ParameterServer() = default;

bool ParameterServer::is_worker() const {
  return impl_->worker_index_ >= 0;
}
int ParameterServer::worker_count() const {
  return static_cast<int>(impl_->workers_.size());
}
int ParameterServer::worker_index() const {
  return impl_->worker_index_;
}
const std::vector<int>& ParameterServer::server_ranks() const {
  return impl_->servers_;
}
void ParameterServer::serve() {
  impl_->serve();
}
void ParameterServer::register_tensor(std::uint64_t key, std::size_t count, DataType type,
                                      const void* initial) {
  impl_->register_tensor(key, count, type, initial);
}
WorkPtr ParameterServer::ipush(std::uint64_t key, const void* data) {
  return impl_->submit(Op::push, key, data, nullptr);
}
WorkPtr ParameterServer::ipull(std::uint64_t key, void* data) {
  return impl_->submit(Op::pull, key, nullptr, data);
}
WorkPtr ParameterServer::ipush_pull(std::uint64_t key, const void* send, void* recv) {
  return impl_->submit(Op::push_pull, key, send, recv);
}
void ParameterServer::barrier() {
  impl_->submit(Op::barrier, 0, nullptr, nullptr)->wait();
}
void ParameterServer::finish() {
  impl_->finish();
}
std::vector<ParameterServer::Piece> ParameterServer::pieces(std::uint64_t key) const {
  return impl_->pieces(key);
}

}  // namespace arcoll
