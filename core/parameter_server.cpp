// The parameter server: one loop per process over a communicator of its own, serving the
// pieces this rank holds and carrying this rank's pushes and pulls.
//
// The protocol, per (worker, server) pair, in the order the worker sends (per-peer FIFO):
//   a header (tag kHeaderTag) naming the operation, the key, the piece and the worker's clock;
//   for init with values, push and push_pull: the piece's bytes (tag kPayloadTag);
//   the server's reply for init, pull, push_pull and barrier: the piece's bytes, or an
//   acknowledgement, on the tag the header asked for (each request its own tag: a bsp pull may
//   be answered after later ones).
// A server takes one worker's messages strictly in order, the payload before the next header,
// so that a worker's pull sees its own earlier pushes and a barrier follows every push before
// it.
#include "arcoll/parameter_server.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/reduce.hpp"
#include "core/calls.hpp"
#include "core/rendezvous.hpp"
#include "core/work_queue.hpp"

namespace arcoll {
namespace {

using Clock = net::Clock;

constexpr std::uint32_t kHeaderTag = 1;
constexpr std::uint32_t kPayloadTag = 2;
constexpr std::uint32_t kReplyTagBase = 0x10000000;  // + the request's number, modulo 2^28
constexpr const char* kOperation = "parameter server";

enum class Op : std::uint32_t { init = 1, push, pull, push_pull, barrier, finish };

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
  }
  return "?";
}

struct Header {
  std::uint32_t op = 0;
  std::uint32_t piece = 0;
  std::uint64_t key = 0;
  std::uint64_t clock = 0;        // push: this push's number (1, 2, ...); pull: pushes so far
  std::uint64_t count = 0;        // init: the key's elements
  std::uint32_t type = 0;         // init: its DataType
  std::uint32_t request = 0;      // the reply's tag, less kReplyTagBase
  std::uint32_t with_values = 0;  // init: initial values follow
  std::uint32_t unused = 0;
};
static_assert(sizeof(Header) == 48);

bool carries_payload(const Header& h) {
  const Op op = static_cast<Op>(h.op);
  return op == Op::push || op == Op::push_pull || (op == Op::init && h.with_values != 0);
}

// Elements per piece of a key of `type`.
std::size_t piece_elements(std::size_t piece_bytes, DataType type) {
  return std::max<std::size_t>(1, piece_bytes / size_of(type));
}

// The elements of the piece a header names; 0 when it lies beyond the key.
std::size_t piece_count(const Header& h, std::size_t piece_bytes) {
  const std::size_t per_piece = piece_elements(piece_bytes, static_cast<DataType>(h.type));
  const std::size_t first = std::size_t(h.piece) * per_piece;
  return first >= h.count ? 0 : std::min(per_piece, std::size_t(h.count) - first);
}

std::string key_text(std::uint64_t key, std::uint32_t piece) {
  return "key " + std::to_string(key) + " piece " + std::to_string(piece);
}

using Bytes = std::vector<char>;

}  // namespace

class ParameterServer::Impl {
 public:
  Impl(Communicator& comm, const ParameterServerOptions& options);
  ~Impl();

  // Worker side (any thread).
  void register_tensor(std::uint64_t key, std::size_t count, DataType type, const void* initial);
  WorkPtr submit(Op op, std::uint64_t key, const void* send, void* recv);
  void finish();
  void serve();
  std::vector<Piece> pieces(std::uint64_t key) const;

  ParameterServerOptions options_;
  std::unique_ptr<Communicator> comm_;  // the parameter server's own
  int rank_ = 0;
  std::vector<int> servers_;
  std::vector<int> workers_;  // ranks, in order
  int worker_index_ = -1;
  bool is_server_ = false;

 private:
  // ---- worker side ------------------------------------------------------------------------
  struct KeyInfo {
    std::size_t count = 0;
    DataType type = DataType::f32;
    std::vector<Piece> pieces;
    std::uint64_t clock = 0;  // this worker's pushes of the key
  };
  // One user call, queued for the loop: its messages, and the Work they complete together.
  struct Call {
    Op op;
    std::uint64_t key = 0;
    const char* send = nullptr;
    char* recv = nullptr;
    std::shared_ptr<QueuedWork> work;
  };
  // A message in flight; `done` runs when it completes.
  struct InFlight {
    RequestPtr request;
    std::function<void()> done;
    std::shared_ptr<const void> keep;  // what the message reads from or lands in
    Clock::time_point deadline;
    std::string what;
  };
  void issue(Call call);
  // A message on the parameter server's communicator. Those to this rank itself (a colocated
  // worker and its own server share) never reach a transport: they match here, per tag in
  // order, and complete at once.
  RequestPtr message(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                     std::uint32_t tag);
  void post(Request::Kind kind, int peer, void* buffer, std::size_t bytes, std::uint32_t tag,
            std::function<void()> done, std::string what,
            std::shared_ptr<const void> keep = nullptr);

  // ---- server side ------------------------------------------------------------------------
  struct Step {  // bsp: one clock's pushes of a piece
    std::shared_ptr<Bytes> sum;
    int pushes = 0;
  };
  struct PendingPull {
    int worker = 0;  // rank
    std::uint64_t clock = 0;
    std::uint32_t request = 0;
    Clock::time_point since;
  };
  struct PieceState {
    std::size_t count = 0;
    DataType type = DataType::f32;
    int first_registrar = -1;
    bool has_initial = false;  // worker 0's init came: the piece may be used
    std::vector<std::pair<int, std::uint32_t>> awaiting_init;  // (worker, request)
    std::shared_ptr<Bytes> value;                              // asp, ssp; bsp: the weights (sgd)
    std::vector<float> velocity;                               // sgd
    std::map<std::uint64_t, Step> steps;                       // bsp: clocks not yet complete
    std::map<std::uint64_t, std::shared_ptr<Bytes>> results;   // bsp: completed clocks
    std::map<int, std::uint64_t> clocks;                       // each worker's pushes
    std::vector<PendingPull> pending;
  };
  struct Client {  // one worker, as this server reads it
    RequestPtr header_request;
    Header header;
    RequestPtr payload_request;
    Bytes payload;
    bool finished = false;
  };
  void post_header_receive(int worker);
  void handle_header(int worker);
  void apply(int worker, const Header& h, const Bytes& payload);
  void answer_pulls(std::uint64_t key, std::uint32_t piece, PieceState& state);
  bool pull_ready(const PieceState& state, std::uint64_t clock) const;
  std::shared_ptr<const Bytes> pull_value(PieceState& state, std::uint64_t clock);
  void reply(int worker, std::uint32_t request, std::shared_ptr<const Bytes> bytes,
             const std::string& what);
  void check_stalls();

  // ---- the loop ---------------------------------------------------------------------------
  void run_loop();
  bool step();  // one round; true when something moved
  bool server_done() const;
  void fail(std::exception_ptr error);
  [[noreturn]] void rethrow_failure() const;

  Engine* engine_ = nullptr;
  std::chrono::milliseconds timeout_;
  std::thread thread_;

  std::mutex mutex_;  // guards calls_, failure_, keys_, finishing_
  std::condition_variable changed_;
  std::deque<Call> calls_;
  std::exception_ptr failure_;
  std::map<std::uint64_t, KeyInfo> keys_;
  std::vector<std::size_t> server_load_;  // bytes assigned to each server so far
  bool finishing_ = false;                // finish() called
  std::atomic<bool> loop_done_{false};

  // Owned by the loop.
  std::map<std::uint32_t, std::deque<Bytes>> self_sent_;           // by tag: not yet received
  std::map<std::uint32_t, std::deque<RequestPtr>> self_receives_;  // by tag: not yet matched
  std::vector<InFlight> inflight_;
  std::vector<std::shared_ptr<QueuedWork>> open_works_;
  std::uint32_t next_request_ = 0;
  std::map<int, Client> clients_;  // server: by worker rank
  std::map<std::pair<std::uint64_t, std::uint32_t>, PieceState> pieces_;
  // Server: the workers at each barrier (by its number), with the request to answer.
  std::map<std::uint64_t, std::vector<std::pair<int, std::uint32_t>>> barriers_;
  std::uint64_t barrier_count_ = 0;  // worker: barriers issued
  Clock::time_point last_progress_ = Clock::now();
};

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
    if (finishing_ && op != Op::finish)
      throw InvalidArgument(op_name(op), "this worker has finished", rank_);
    if (op != Op::barrier && op != Op::finish && op != Op::init) {
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
  const bool replies = op == Op::init || op == Op::pull || op == Op::push_pull || op == Op::barrier;
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

// ---- server side ----------------------------------------------------------------------------

void ParameterServer::Impl::post_header_receive(int worker) {
  Client& c = clients_[worker];
  c.header_request = message(Request::Kind::recv, worker, &c.header, sizeof(Header), kHeaderTag);
}

void ParameterServer::Impl::handle_header(int worker) {
  Client& c = clients_[worker];
  const Header& h = c.header;
  if (h.op < static_cast<std::uint32_t>(Op::init) || h.op > static_cast<std::uint32_t>(Op::finish))
    throw ProtocolError(
        kOperation,
        "rank " + std::to_string(worker) + " sent an unknown operation " + std::to_string(h.op),
        rank_, worker);
  if (carries_payload(h)) {
    if (h.type > static_cast<std::uint32_t>(DataType::i64))
      throw ProtocolError(kOperation, "rank " + std::to_string(worker) + " sent an unknown type",
                          rank_, worker);
    const std::size_t n = piece_count(h, options_.piece_bytes);
    if (n == 0)
      throw ProtocolError(kOperation,
                          "rank " + std::to_string(worker) + " sent " + key_text(h.key, h.piece) +
                              " beyond its " + std::to_string(h.count) + " elements",
                          rank_, worker);
    c.payload.resize(n * size_of(static_cast<DataType>(h.type)));
    c.payload_request =
        message(Request::Kind::recv, worker, c.payload.data(), c.payload.size(), kPayloadTag);
    return;
  }
  c.payload.clear();
  apply(worker, h, c.payload);
}

bool ParameterServer::Impl::pull_ready(const PieceState& state, std::uint64_t clock) const {
  if (!state.has_initial) return false;
  switch (options_.consistency) {
    case Consistency::bsp:
      return clock == 0 || state.results.count(clock) > 0;
    case Consistency::asp:
      return true;
    case Consistency::ssp: {
      const std::uint64_t needed =
          clock > std::uint64_t(options_.staleness) ? clock - std::uint64_t(options_.staleness) : 0;
      for (int w : workers_) {
        auto it = state.clocks.find(w);
        if ((it == state.clocks.end() ? 0 : it->second) < needed) return false;
      }
      return true;
    }
  }
  return false;
}

std::shared_ptr<const Bytes> ParameterServer::Impl::pull_value(PieceState& state,
                                                               std::uint64_t clock) {
  if (options_.consistency == Consistency::bsp && options_.rule == ServerRule::sum && clock > 0)
    return state.results.at(clock);
  return state.value;
}

void ParameterServer::Impl::answer_pulls(std::uint64_t key, std::uint32_t piece,
                                         PieceState& state) {
  std::vector<PendingPull> waiting;
  waiting.swap(state.pending);
  for (const PendingPull& p : waiting) {
    if (pull_ready(state, p.clock))
      reply(p.worker, p.request, pull_value(state, p.clock), "pull of " + key_text(key, piece));
    else
      state.pending.push_back(p);
  }
  // bsp: a step's sum is needed until every worker has moved past it.
  if (options_.consistency == Consistency::bsp) {
    std::uint64_t slowest = ~std::uint64_t(0);
    for (int w : workers_) {
      auto it = state.clocks.find(w);
      slowest = std::min(slowest, it == state.clocks.end() ? 0 : it->second);
    }
    for (auto it = state.results.begin(); it != state.results.end() && it->first < slowest;)
      it = state.results.erase(it);
  }
}

void ParameterServer::Impl::reply(int worker, std::uint32_t request,
                                  std::shared_ptr<const Bytes> bytes, const std::string& what) {
  post(
      Request::Kind::send, worker, const_cast<char*>(bytes->data()), bytes->size(),
      kReplyTagBase + request, [] {}, what + " to rank " + std::to_string(worker), bytes);
}

void ParameterServer::Impl::apply(int worker, const Header& h, const Bytes& payload) {
  const Op op = static_cast<Op>(h.op);
  if (op == Op::finish) {
    clients_[worker].finished = true;
    return;
  }
  if (op == Op::barrier) {
    // Every worker's messages before its barrier have been applied once all have arrived.
    auto& arrived = barriers_[h.clock];
    arrived.emplace_back(worker, h.request);
    if (arrived.size() == workers_.size()) {
      for (auto [w, request] : arrived)
        reply(w, request, std::make_shared<Bytes>(sizeof(std::uint64_t)), "barrier");
      barriers_.erase(h.clock);
    }
    return;
  }
  const DataType type = static_cast<DataType>(h.type);
  PieceState& state = pieces_[{h.key, h.piece}];
  const std::string where = key_text(h.key, h.piece);
  if (op == Op::init) {
    const std::size_t n = piece_count(h, options_.piece_bytes);
    if (state.first_registrar < 0) {
      state.first_registrar = worker;
      state.count = n;
      state.type = type;
      state.value = std::make_shared<Bytes>(n * size_of(type), 0);
      if (options_.rule == ServerRule::sgd) state.velocity.assign(n, 0.0f);
    } else if (state.type != type || state.count != n) {
      throw InvalidArgument("register",
                            "rank " + std::to_string(worker) + " registered key " +
                                std::to_string(h.key) + " as " + std::to_string(h.count) + " " +
                                std::string(to_string(type)) + ", unlike rank " +
                                std::to_string(state.first_registrar),
                            rank_, worker);
    }
    if (worker == workers_.front()) {
      if (h.with_values) *state.value = payload;
      state.has_initial = true;
    }
    state.awaiting_init.emplace_back(worker, h.request);
    if (state.has_initial) {
      for (auto [w, request] : state.awaiting_init)
        reply(w, request, std::make_shared<Bytes>(sizeof(std::uint64_t)), "register of " + where);
      state.awaiting_init.clear();
    }
    return;
  }
  if (!state.has_initial)
    throw ProtocolError(
        op_name(op),
        "rank " + std::to_string(worker) + " used " + where + " before it was registered", rank_,
        worker);
  if (op == Op::push || op == Op::push_pull) {
    state.clocks[worker] = h.clock;
    const std::size_t n = state.count;
    if (options_.consistency == Consistency::bsp) {
      Step& step = state.steps[h.clock];
      if (!step.sum) {
        step.sum = std::make_shared<Bytes>(payload);
      } else {
        kernels::reduce(step.sum->data(), step.sum->data(), payload.data(), n, type, ReduceOp::sum);
      }
      if (++step.pushes == static_cast<int>(workers_.size())) {
        if (options_.rule == ServerRule::sgd) {
          // The weights move by the mean gradient of the step.
          auto weights = std::make_shared<Bytes>(*state.value);
          auto* w = reinterpret_cast<float*>(weights->data());
          const auto* g = reinterpret_cast<const float*>(step.sum->data());
          const float scale = 1.0f / static_cast<float>(workers_.size());
          for (std::size_t i = 0; i < n; ++i) {
            state.velocity[i] = float(options_.momentum) * state.velocity[i] + g[i] * scale;
            w[i] -= float(options_.learning_rate) * state.velocity[i];
          }
          state.value = weights;
          state.results[h.clock] = weights;
        } else {
          state.results[h.clock] = step.sum;
        }
        state.steps.erase(h.clock);
      }
    } else {
      // Replies in flight may still read the value: change a copy when they do.
      if (state.value.use_count() > 1) state.value = std::make_shared<Bytes>(*state.value);
      if (options_.rule == ServerRule::sgd) {
        auto* w = reinterpret_cast<float*>(state.value->data());
        const auto* g = reinterpret_cast<const float*>(payload.data());
        for (std::size_t i = 0; i < n; ++i) {
          state.velocity[i] = float(options_.momentum) * state.velocity[i] + g[i];
          w[i] -= float(options_.learning_rate) * state.velocity[i];
        }
      } else {
        kernels::reduce(state.value->data(), state.value->data(), payload.data(), n, type,
                        ReduceOp::sum);
      }
    }
  }
  if (op == Op::pull || op == Op::push_pull)
    state.pending.push_back({worker, h.clock, h.request, Clock::now()});
  answer_pulls(h.key, h.piece, state);
}

// A pull or registration that waits longer than the deadline names the workers it waits for.
void ParameterServer::Impl::check_stalls() {
  const auto now = Clock::now();
  for (auto& [id, state] : pieces_) {
    for (const PendingPull& p : state.pending) {
      if (now - p.since < timeout_) continue;
      std::string missing;
      for (int w : workers_) {
        auto it = state.clocks.find(w);
        const std::uint64_t clock = it == state.clocks.end() ? 0 : it->second;
        if (!pull_ready(state, p.clock) && clock < p.clock)
          missing += (missing.empty() ? "" : ", ") + std::to_string(w) + " (at push " +
                     std::to_string(clock) + ")";
      }
      throw TimeoutError(kOperation,
                         "the pull of " + key_text(id.first, id.second) + " by rank " +
                             std::to_string(p.worker) + " at push " + std::to_string(p.clock) +
                             " waited " + seconds_text(timeout_) + " for rank(s) " + missing,
                         rank_, p.worker);
    }
  }
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
  engine_->progress(Clock::now());
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
      // transports sleep until a message comes, up to a slice: short while calls keep coming
      // (this rank's next call does not wake a transport), longer once they have stopped.
      if (inflight_.empty() && !is_server_) {
        std::unique_lock lock(mutex_);
        changed_.wait_for(lock, std::chrono::milliseconds(1),
                          [&] { return !calls_.empty() || finishing_; });
      } else {
        const bool busy = Clock::now() - last_progress_ < std::chrono::milliseconds(2);
        engine_->progress(Clock::now() +
                          (busy ? std::chrono::microseconds(10) : std::chrono::microseconds(200)));
      }
    }
  } catch (...) {
    fail(std::current_exception());
  }
  loop_done_ = true;
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
