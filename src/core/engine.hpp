// The message engine: the one path of every point-to-point message of a communicator, from
// the algorithms (which see it as their PointToPoint) and send/recv down to the transports.
// It routes each peer to the transport the registry picks for the pair, stages what must be
// transformed on the way (f32 narrowed to a 16-bit wire format, messages checked against their
// checksum), waits with the call's deadline while watching for abort(), and words the
// transports' failures for the call in progress.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "algorithms/layout.hpp"
#include "algorithms/point_to_point.hpp"
#include "arcoll/error.hpp"
#include "arcoll/options.hpp"
#include "arcoll/tuning.hpp"
#include "src/base/request.hpp"
#include "src/core/boards.hpp"
#include "transports/transport.hpp"

namespace arcoll {

struct Rendezvous;

// ARCOLL_FAULT_CORRUPT=<rank>:<n>, for testing the checksum: rank <rank> flips a bit of the
// n-th non-empty message it checks, as a faulty link would. The n for `rank`, 0 for none;
// ConfigurationError when malformed.
std::uint64_t corruption_fault(int rank);

class Engine final : public PointToPoint {
 public:
  // Sets up a transport for every peer through `rendezvous`'s store. `options` must outlive
  // the engine; `corrupt_at` is corruption_fault()'s answer.
  Engine(const Rendezvous& rendezvous, const Options& options, std::uint64_t corrupt_at);
  ~Engine() override;

  // PointToPoint, as algorithms see it during a collective.
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_of(int rank) const override;
  int numa_of(int rank) const override;
  std::size_t chunk_bytes() const override { return call_.chunk_bytes; }
  bool pace_returns() override {
    pacing_asked_ = true;
    return call_.pace_returns;
  }
  // Whether the call begun last asked pace_returns().
  bool pacing_asked() const { return pacing_asked_; }
  const Layout& layout() const override { return layout_; }
  // The transport within hosts' Transport::reads_reductions_across.
  bool reads_reductions_across_within_hosts() const {
    return reads_reductions_across_within_hosts_;
  }
  RequestPtr isend(int peer, const void* buffer, std::size_t bytes, int channel) override;
  RequestPtr irecv(int peer, void* buffer, std::size_t bytes, int channel) override;
  RequestPtr irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                          DataType type, ReduceOp op, int channel) override;
  RequestPtr irecv_reduce_send(int peer, void* buffer, const void* with, std::size_t count,
                               DataType type, ReduceOp op, int channel,
                               int forward_channel) override;
  void wait(const RequestPtr& request) override;
  void* scratch(std::size_t bytes, int slot) override;
  void copy(void* to, const void* from, std::size_t bytes) override;
  void round_to_wire(void* data, std::size_t count, DataType type) override;
  bool rounds_to_wire(DataType type) const override;
  std::size_t board_capacity() const override;
  std::span<const std::byte* const> exchange_on_boards(const void* data,
                                                       std::size_t bytes) override;

  // The call its messages belong to until the next begin(): how errors name it, its deadline,
  // and what its messages carry.
  struct Call {
    std::string_view kind;          // "allreduce", "send"
    std::uint64_t sequence = 0;     // collectives count from 1; 0: point-to-point, unnumbered
    std::uint64_t signature = 0;    // src/core/call_signature.hpp; 0 for point-to-point
    int root = 0;                   // of a rooted collective, whole
    DataType wire = DataType::f32;  // f32 elements travel as this (f32: as they are)
    std::size_t chunk_bytes = 0;
    bool pace_returns = false;      // PointToPoint::pace_returns
    bool streaming_stores = false;  // its receives land so (Request::streaming_stores)
    Request::Receivers receivers = Request::Receivers::copy;  // Request::receivers
    // A collective that runs on its device buffers (their kind, which every transport of the
    // call takes: takes_device()) rather than host copies of them: its messages from and into
    // them, and its scratch, are of that kind. Null: host memory.
    const DeviceMemoryInfo* memory = nullptr;
    std::array<std::span<const std::byte>, 2> device_buffers{};  // send and receive
  };
  void begin(const Call& call, std::chrono::milliseconds timeout);
  // A collective's last step once its messages are done: it fails after all where a peer
  // said it failed this call (or an earlier one), so that no rank keeps a result that another
  // rank's failed call denies it (an abort that reached this rank after the peer's data).
  void end();
  // Rooted collectives: the ranks agree on the root. A rank that names itself the root
  // receives nothing else, so ranks that name different roots would each keep their own data,
  // or wait for one another until the timeout. Every rank hears every other's root, and
  // fails the call itself naming two ranks that differ: in one step where messages are cheap
  // and the call (`bytes` a rank) small, each rank telling every other; else by dissemination
  // (round k: tell rank + 2^k the lowest and highest roots heard so far, hear rank - 2^k),
  // log2(size) rounds of one message each. The step, or the first round, is posted before the
  // algorithm and waited for after it.
  void post_root_check(int root, std::size_t bytes);
  void finish_root_check();
  // "allreduce #12", "send".
  std::string call_name() const;
  // A message of a point-to-point call (send, recv, sendrecv), with the user's tag; `memory`:
  // the kind of device memory `buffer` lies in, which the transport to `peer` takes as it is
  // (takes_device()).
  RequestPtr post_tagged(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                         std::uint32_t tag, const DeviceMemoryInfo* memory = nullptr);
  // A send of a point-to-point call from host memory, sent whole at once where its transport
  // can (Transport::send_now; `overwritten`: by the call's receive): true, with no request to
  // wait for; false where it must be posted.
  bool send_now(int peer, std::uint32_t tag, const void* buffer, std::size_t bytes,
                bool overwritten = false);
  // A receive of a point-to-point call into host memory, taken at once where its transport
  // can (Transport::receive_now): true, with no request to wait for.
  bool receive_now(int peer, std::uint32_t tag, void* buffer, std::size_t bytes);
  // Whether a point-to-point message to or from `peer` may stay in `buffer`, `memory`'s device
  // memory: its transport reads such buffers from the device, the buffer can be shared with
  // other processes, and no checksum reads it here.
  bool takes_device(int peer, const DeviceMemoryInfo& memory, const void* buffer) const;
  // Whether every peer's transport takes `memory` so, for a collective on `buffers` (all of
  // them shareable).
  bool takes_device_everywhere(const DeviceMemoryInfo& memory,
                               std::span<const void* const> buffers) const;
  // For loops that serve many peers at once (the parameter server), which keep time
  // themselves: progress() moves every transport's messages along, sleeping until `until` at
  // the latest while nothing moves (polling first or not: Waiting; on a queue's progress
  // thread, poll_first polls briefly); test() says whether `request` has completed, throwing
  // its error, the transports' first failure or an abort's.
  void progress(net::Clock::time_point until, Waiting waiting);
  bool test(const RequestPtr& request);
  // Makes a progress() sleeping in another thread return (Transport::wake). Thread-safe.
  void wake() noexcept;

  // After an error in a call: every peer is told (so that it fails too instead of waiting),
  // and `e` is thrown as `operation`'s.
  [[noreturn]] void fail(const Error& e, const std::string& operation);
  // Tells every peer that this rank gives up, for `reason`, outside a call.
  void abort_links(const std::string& reason);
  // The first failure any transport saw, or null.
  std::exception_ptr transport_failure() const;

  // abort() may come from another thread while a call blocks: its waits fail within
  // moments. False when an abort was requested before.
  bool request_abort(const std::string& reason);
  bool abort_requested() const { return abort_requested_.load(std::memory_order_acquire); }
  std::string abort_text() const;

  // f32 data rounded as the 16-bit `wire` format rounds it.
  void round_through_wire(void* data, std::size_t count, DataType wire);

  // The transports in use, joined by '+'; the one that reaches `peer` ("self" for this rank).
  const std::string& transport_name() const { return transport_name_; }
  std::string transport_to(int peer) const;
  // The cost model's link costs, from `tuning` where it has the transport that carries
  // messages within (across) hosts, else its built-in figures.
  void apply_tuning(const Tuning& tuning);

 private:
  RequestPtr post(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                  std::uint32_t tag, std::optional<Request::Landing> landing);
  RequestPtr start(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                   std::uint32_t tag, const std::optional<Request::Landing>& landing);
  RequestPtr make_request(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                          std::uint32_t tag, const std::optional<Request::Landing>& landing);
  std::uint32_t collective_tag(int channel) const;
  // The collective from which this rank fails: the one it is in, or the next.
  std::uint64_t failed_call() const { return in_collective_ ? last_collective_ : last_collective_ + 1; }
  // Whether messages of a call on `wire` go straight to the transport: not staged (narrowed,
  // checksummed), so a transport that forwards() can send its reduced pieces on as they land.
  bool unstaged(DataType wire) const { return wire == DataType::f32 && !options_.checksum; }
  [[noreturn]] void raise(const std::exception_ptr& failure) const;
  // Before a blocked wait sleeps again: throws the transports' failure, an abort's, or a
  // TimeoutError naming `peer` once the call's deadline passes (`waiting_for()`: what for,
  // worded only then). Returns the time it read, for the wait that follows.
  template <class WaitingFor>
  net::Clock::time_point check_blocked(int peer, const WaitingFor& waiting_for);
  void finish_staged(const Request& request);
  // ARCOLL_CHECKSUM: throws naming the link when a received message does not match the
  // checksum its sender computed.
  void verify_checksum(const Request& request, std::uint32_t sent);
  // After a collective's wait timed out: the ranks that did not also time out in this call
  // (hung, dead, or in another call), as "; ranks not waiting in this call: 1, 4", found
  // through the store in a short survey; empty when all were or the store cannot tell.
  std::string ranks_absent_from_call();
  // The kind of a collective's device buffer that a send to `peer` copies to host memory as
  // it is posted (the peer's transport cannot read the buffer: another host's), so that an
  // algorithm's chunks are copied while the ones before them travel; null for a send as it is.
  // Receives land through the kind.
  const DeviceMemoryInfo* sent_from_host_copy(int peer, const void* buffer,
                                              std::size_t bytes) const;
  std::vector<char> staging_buffer(std::size_t bytes);
  // A cleared request, reused from earlier calls when nobody holds it any longer: a small
  // collective then allocates nothing for its messages.
  RequestPtr fresh_request();

  const Options& options_;
  int rank_;
  int size_;
  std::vector<int> host_of_;
  std::vector<int> numa_of_;
  StoreClient* store_;
  Layout layout_;
  // Several transports when ranks share some hosts but not all.
  std::vector<std::unique_ptr<Transport>> transports_;
  // Whether a transport parked itself at the end of the last call (Transport::park): taken
  // back before anything here touches the transports again. (Const methods take it back too.)
  mutable bool parked_ = false;
  void take_back_parked() const;
  std::vector<Transport*> route_;  // which transport reaches each rank
  const TransportInfo* within_host_;
  const TransportInfo* across_hosts_;
  std::string transport_name_;
  // Where one transport reaches every peer and shares memory with them.
  std::unique_ptr<CallBoards> boards_;
  // Whether a wait looks a few times (on the boards, or through Transport::poll()) before it
  // reads the clock and waits in the transport.
  bool quick_looks_ = true;

  Call call_;
  std::uint64_t last_collective_ = 0;  // the sequence of the last collective begun
  bool in_collective_ = false;         // begun and not ended
  bool pacing_asked_ = false;          // pace_returns() asked since begin()
  bool reads_reductions_across_within_hosts_ = false;
  // Tags of collectives have the top bit set (user point-to-point tags must not), the channel
  // in the next bits and the call's sequence number in the low 24. Bit 30 marks the engine's
  // own messages of a collective (the root check), apart from every channel of its algorithm.
  static constexpr std::uint32_t kCollectiveTagBit = 0x80000000u;
  static constexpr std::uint32_t kCheckTagBit = 0x40000000u;
  static constexpr int kChannelShift = 24;
  static constexpr std::uint32_t kSequenceMask = (1u << kChannelShift) - 1;
  static_assert(kMaxChannels <= 64, "channels must fit in bits 24..29 of a tag");
  std::uint32_t tag_ = 0;
  // The root check by messages (root_check.cpp): the lowest and highest roots heard so far,
  // each with a rank naming it; what each round sent (kept until the next check: a send may
  // still be in flight), heard, and the messages. `roots_from_every_rank_`: in this call, each
  // rank tells every other its root at once (sending roots_seen_, which changes only once every
  // message is done); else by dissemination, in rounds, each telling what the last one heard.
  struct RootsSeen {
    std::int32_t lowest, lowest_by, highest, highest_by;
  };
  RootsSeen roots_seen_{};
  std::vector<RootsSeen> roots_heard_;
  std::vector<RootsSeen> roots_told_;
  std::vector<RequestPtr> root_messages_;
  bool roots_from_every_rank_ = false;
  // Whether every transport's small messages are cheap (Transport::small_messages_cheap).
  bool cheap_messages_ = false;
  // Whether this call's root check sends (tags with kCheckTagBit) are Request::held: in a
  // small call, where the call's own messages and a wait follow them.
  bool holds_root_sends_ = false;
  void post_root_round(int round);
  void hear_roots();
  // The root check where every rank shares the boards: each rank's board says which call it
  // entered, with its signature and root; the check reads them, no message. One look: throws
  // naming a rank that entered the call otherwise, else returns the first rank not yet seen
  // in it (-1: none); the finish waits for all.
  int root_check_on_boards();
  void finish_root_check_on_boards();
  // Posted on the boards, not finished; closed too by an exchange on the boards, where every
  // rank's part carried this rank's signature, which holds the root.
  bool root_check_open_ = false;
  // Waits on the boards until `ready()`, within the call's deadline, watching for aborts and
  // for peers gone (`first_missing()`: the rank waited for, which has yet to do `awaited`) or
  // in another call (`throw_if_other()`, looked at once a wait took a while, and at the end).
  template <class Ready, class Missing, class ThrowIfOther>
  void await_on_boards(Ready ready, Missing first_missing, ThrowIfOther throw_if_other,
                       const char* awaited);
  net::Clock::time_point deadline_{};  // of the call, from its first blocking wait
  std::chrono::milliseconds timeout_{0};

  std::vector<RequestPtr> requests_;  // fresh_request()'s, looked at from request_cursor_ on
  std::size_t request_cursor_ = 0;
  std::vector<std::vector<char>> scratch_;
  // Scratch of calls on the device (Call::memory), by slot, and the kind that allocated each.
  struct DeviceScratch {
    const DeviceMemoryInfo* memory = nullptr;
    void* buffer = nullptr;
    std::size_t bytes = 0;
  };
  std::vector<DeviceScratch> device_scratch_;
  // The device memory `buffer` lies in during a call on the device: one of its buffers or its
  // scratch; null otherwise.
  const DeviceMemoryInfo* memory_of(const void* buffer) const;
  // Whether `peer`'s transport takes `memory`'s buffers as they are, and no checksum reads them.
  bool routes_device(int peer, const DeviceMemoryInfo& memory) const;
  void* device_scratch(std::size_t bytes, int slot);
  void free_device_scratch() noexcept;
  // Messages staged on their way, finished when waited for: sends narrowed to the wire format
  // (from `staging`), and under ARCOLL_CHECKSUM the CRC32C of every message (`checksum`,
  // travelling as `trailer`) with the receives that must be checked before they land (into
  // `staging`, landed in `destination` as `landing` says once checked).
  struct Staged {
    std::vector<char> staging;
    void* destination = nullptr;
    std::optional<Request::Landing> landing;
    std::uint32_t checksum = 0;
    RequestPtr trailer;
  };
  std::unordered_map<const Request*, Staged> staged_;
  // Receives of irecv_reduce_send whose transport does not forward: their result is sent on
  // when they are waited for.
  struct Unforwarded {
    RequestPtr receive;  // held: a pooled request handed out again must not match
    void* buffer;
    std::size_t bytes;
    int forward_channel;
  };
  std::vector<Unforwarded> unforwarded_;
  std::vector<std::vector<char>> staging_free_;  // reused across calls
  std::vector<std::uint16_t> wire_block_;        // round_through_wire's 16-bit values

  std::atomic<bool> abort_requested_{false};
  mutable std::mutex abort_mutex_;  // guards abort_reason_
  std::string abort_reason_;

  std::uint64_t corrupt_at_;
  std::uint64_t checked_messages_ = 0;
};

}  // namespace arcoll
