// The parameter server's inside, shared by its two halves: parameter_server.cpp (setting up,
// the worker side, the loop) and parameter_server_serving.cpp (the server side). One loop per
// process over a communicator of its own serves the pieces this rank holds and carries this
// rank's pushes and pulls.
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
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "arcoll/parameter_server.hpp"
#include "src/core/calls.hpp"
#include "src/core/work_queue.hpp"

namespace arcoll {
namespace ps {

using Clock = net::Clock;

inline constexpr std::uint32_t kHeaderTag = 1;
inline constexpr std::uint32_t kPayloadTag = 2;
inline constexpr std::uint32_t kReplyTagBase = 0x10000000;  // + the request's number, modulo 2^28
inline constexpr const char* kOperation = "parameter server";

// agree: a registration told to the first server, which answers once every worker's
// registration of the same number is the same (key, count and type), else fails naming both.
enum class Op : std::uint32_t { init = 1, push, pull, push_pull, barrier, finish, agree };

// "register", "push", ...: how errors name an operation.
const char* op_name(Op op);

struct Header {
  std::uint32_t op = 0;
  std::uint32_t piece = 0;
  std::uint64_t key = 0;
  std::uint64_t clock = 0;  // push: this push's number (1, 2, ...); pull: pushes so far;
                            // agree: the registration's number (1, 2, ...)
  std::uint64_t count = 0;        // init: the key's elements
  std::uint32_t type = 0;         // init: its DataType
  std::uint32_t request = 0;      // the reply's tag, less kReplyTagBase
  std::uint32_t with_values = 0;  // init: initial values follow
  std::uint32_t unused = 0;
};
static_assert(sizeof(Header) == 48);

inline bool carries_payload(const Header& h) {
  const Op op = static_cast<Op>(h.op);
  return op == Op::push || op == Op::push_pull || (op == Op::init && h.with_values != 0);
}

// Elements per piece of a key of `type`.
inline std::size_t piece_elements(std::size_t piece_bytes, DataType type) {
  return std::max<std::size_t>(1, piece_bytes / size_of(type));
}

// The elements of the piece a header names; 0 when it lies beyond the key.
inline std::size_t piece_count(const Header& h, std::size_t piece_bytes) {
  const std::size_t per_piece = piece_elements(piece_bytes, static_cast<DataType>(h.type));
  const std::size_t first = std::size_t(h.piece) * per_piece;
  return first >= h.count ? 0 : std::min(per_piece, std::size_t(h.count) - first);
}

inline std::string key_text(std::uint64_t key, std::uint32_t piece) {
  return "key " + std::to_string(key) + " piece " + std::to_string(piece);
}

using Bytes = std::vector<char>;

}  // namespace ps

class ParameterServer::Impl {
 public:
  using Op = ps::Op;
  using Header = ps::Header;
  using Bytes = ps::Bytes;
  using Clock = ps::Clock;

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
    std::uint64_t registration = 0;  // this worker's n-th register_tensor, from 1
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
  // First server: the registrations of each number so far, (worker, its header) each.
  std::map<std::uint64_t, std::vector<std::pair<int, Header>>> agreements_;
  std::uint64_t barrier_count_ = 0;  // worker: barriers issued
  Clock::time_point last_progress_ = Clock::now();
  std::atomic<bool> waiting_in_transports_{false};  // the loop may sleep there (see submit)
};

}  // namespace arcoll
