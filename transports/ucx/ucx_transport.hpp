// UCX transport: UCP active messages on one worker per communicator, over whatever UCX finds
// (InfiniBand and RoCE verbs, its shared memory and cma, TCP; UCX_TLS and UCX_NET_DEVICES pass
// through).
//
// Active messages, not tag matching: every message carries arcoll's header (the call's
// signature, the tag, a per-peer sequence number) and meets its receive through the shared
// Matching, so a message of another call fails both sides naming both calls before any byte
// lands, exactly as over shm and tcp; with UCP's tag matching a message of another call would
// wait unmatched until the timeout, or be cut to the wrong size. Eager messages land from
// UCX's buffer as they arrive (reduced on arrival; to a peer of this machine, in pieces of one
// fifo segment each), or are kept until their receive is posted (UCX's buffer itself, held,
// where UCX lends it);
// rendezvous messages are fetched by the receiver once matched, straight into the user's
// buffer when they land as a copy (UCX moves them zero-copy where its transport can), else
// into a staging buffer that is then reduced. A copy of a call beyond the caches is announced
// instead, and comes in eager pieces once its receiver has cleared it (UcxTransport::announce).
// UCX may deliver a peer's messages out of order across its lanes: the sequence number puts
// them back in order.
//
// A dead peer: UCX's endpoint error handler names it (connections lost); a peer on the same
// machine is also watched through a pidfd, since UCX's shared memory does not notice a death.
// Waiting polls the worker for the time its Waiting says (transport.hpp's Polling), then arms it
// and sleeps on its event fd (and the pidfds) until the deadline.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "transports/common/matching.hpp"
#include "transports/common/parked.hpp"
#include "transports/common/peer_process.hpp"
#include "transports/common/rendezvous.hpp"
#include "transports/transport.hpp"

namespace arcoll::ucx {

using net::Clock;

// The kinds of active message, by UCX id.
// kFarewell answers a goodbye: the peer has read everything sent before it. kAnnounce: a large
// copy's request-to-send (no bytes), kClear: its receiver's clear-to-send once the receive is
// posted, kCleared: a piece of the cleared message (see UcxTransport::announce).
enum AmId : unsigned {
  kData = 1,
  kAbort = 2,
  kGoodbye = 3,
  kHello = 4,
  kFarewell = 5,
  kAnnounce = 6,
  kClear = 7,
  kCleared = 8
};
inline constexpr unsigned kAmIds = 8;

// Ahead of every active message's bytes.
struct Header {
  std::uint64_t sequence;       // on this peer pair, from 0, across every kind
  std::uint64_t signature;      // data: its call's (src/core/call_signature.hpp)
  std::uint64_t failed_call;    // abort: the collective its sender gave up on
  std::uint32_t tag;            // data
  std::int32_t from;            // the sender's rank
  std::uint64_t offset;         // data: where this piece's bytes go in its message; announce
                                // and clear: the send's number, the sender's
  std::uint64_t message_bytes;  // data: the whole message's (more than this piece when cut)
};

// A send to a peer of this machine over UCX's shared memory whose receiver reduces it (or
// passes it on, or gathers it) as it lands goes eager at every size, in pieces of one fifo
// segment: a reduction reads each piece once, in cache, while the sender writes the next, where
// UCX's rendezvous would first fetch the whole message (process_vm_readv) into a staging buffer
// that the reduction then reads again, with the sender idle meanwhile. Pieces that come before
// their receive are held (kHeldEagerBytes at most) or copied until it comes, so a late receiver
// costs memory for as long as it is late. 2 ranks on 2 cores of an AMD EPYC, eager limit 256
// KiB -> none, the two builds run by turns, out-of-place busbw (GB/s) of `arbench --np 2
// --transport ucx`: all-reduce (halving_doubling) 1 MiB 4.8 -> 8.7, 16 MiB 3.6 -> 5.7, 256 MiB
// 4.6 -> 5.2; broadcast 1 MiB 3.6-3.7 -> 14.5-14.7, 64 MiB 3.4-3.5 -> 6.0; gather 1 MiB
// 19.5-20.8 -> 26.4-29.9, 64 MiB 6.7-7.3 -> 12.8-13.2. Against Open MPI over `pml ucx` in the
// same run, all-reduce 1 MiB x0.84 -> x1.71, 4 MiB x0.87 -> x1.54. The peak memory of 256 MiB
// broadcasts and reductions did not change (549 against 555 MB). A gather's senders only send,
// and an eager sender is done without waiting for the root to fetch. Messages whose receivers
// only copy them are another matter (kCopyEagerBytes), and so are the whole halves of 2-rank
// all-reduces of 2-16 MiB (kReductionRendezvousBytes).
// Eager messages to a peer of this machine go in pieces of this size, each of which fits one
// segment of UCX's shared-memory fifo (kFifoSegmentBytes: room for a piece, our header and
// UCX's 8 B). UCX hands a message of one segment over where it lies in the fifo, and copies
// one of several segments into a buffer of its own first, which arcoll then copies (or
// reduces) again. Cut here, each piece lands in its receive from the fifo, as Open MPI's tag
// matching over UCX lands its fragments. Each piece costs the receiver a handler's call: with
// pieces of 32 KiB instead of UCX's default segment (8 KiB of room), 2 ranks on 2 cores of
// an Intel Xeon took 0.70-0.74 of the time for all-reduces of 64-512 KiB and 0.81-0.84 for
// reduces of 256-512 KiB. UCX's fifo keeps a segment's length in 16 bits: segments of 64 KiB
// broke messages.
inline constexpr std::size_t kPieceBytes = 32 * 1024;
// UCX_POSIX_SEG_SIZE and UCX_SYSV_SEG_SIZE of arcoll's UCX context, unless the environment sets
// them (pieces larger than a segment still arrive, assembled by UCX first).
inline constexpr std::size_t kFifoSegmentBytes = kPieceBytes + sizeof(Header) + 8;
static_assert(kFifoSegmentBytes < 65536, "UCX's fifo keeps a segment's length in 16 bits");
// The segments its receive pool grows by (UCX_POSIX_RX_BUFS_GROW; UCX's default, 512, is for
// segments of 8 KiB).
inline constexpr std::size_t kFifoRxBufsGrow = 128;
// Copies go eager up to 32 KiB, one fifo segment (kPieceBytes); larger ones go by UCX's
// rendezvous: below it a rendezvous's round trip costs more than a second copy where the
// receiver must first be scheduled. 2 cores of an Intel Xeon, same-run A/B of the limit at
// 16 KiB and at 32, messages of 32 KiB, three runs: 2 ranks, all-gather 9.3-10.4 -> 8.1-9.2
// us, all-to-all 9.0-9.9 -> 6.8-7.7, gather 5.9-8.1 -> 5.1-5.9, scatter 6.7-8.1 -> 4.6-6.8;
// 4 ranks, gather 28-30 -> 21-27, the others within the noise of 4 ranks on 2 cores. At 64
// KiB the rendezvous is as fast or faster (all-gather and all-to-all of 64 KiB blocks on 2
// ranks: 12.6-13.8 and 12.2-13.2 us against 12.7-14.8 and 13.3-15.7 eager). Eager at every
// size, as reductions go, was slower out of place from 256 KiB (2 ranks, AMD EPYC, GB/s of two
// runs each, 1 MiB: all-gather 18.4-22.0 -> 16.2-17.6, all-to-all 18.4-21.5 -> 16.2-17.3,
// sends 12.3-16.0 -> 10.2-10.8): the receiver copies each byte a second time, and the
// rendezvous's one copy into place moves it once (so on 2 cores of an Intel Xeon, sendrecv of
// 128 and 256 KiB: 22.5 and 41.5 us eager, 7.0 and 11.5 by rendezvous). Calls beyond the
// caches are another matter (UcxTransport::announce).
inline constexpr std::size_t kCopyEagerBytes = kPieceBytes;

// How an active message's bytes reach its handler: eager bytes UCX lends for the handler's
// call only (`passing`: inline in its fifo, or read from TCP), eager bytes in a buffer of
// UCX's that the handler may keep (`keepable`: UCS_INPROGRESS keeps it, ucp_am_data_release
// gives it back), or a rendezvous descriptor, fetched later.
enum class Arrived { passing, keepable, rendezvous };

// Eager bytes that came before their receive: UCX's own buffer where it lets us keep it (no
// copy: a reduce's root, whose sender runs a call ahead, read every piece twice before), else
// a copy (pieces copied one after another share one).
struct KeptBytes {
  void* descriptor = nullptr;  // UCX's buffer of `held_length` bytes, held until landed
  std::size_t held_length = 0;
  std::vector<char> copy;  // without a descriptor
  const char* data() const {
    return descriptor != nullptr ? static_cast<const char*>(descriptor) : copy.data();
  }
  std::size_t size() const { return descriptor != nullptr ? held_length : copy.size(); }
};

// What messages that came before their receive hold of one worker's: the worker (null once
// it is gone: what was held ended with it), and the bytes of eager buffers held.
struct HeldFromWorker {
  ucp_worker_h worker = nullptr;
  std::size_t eager_bytes = 0;
};

// At most this much of UCX's eager buffers is held at once; beyond, kept bytes are copied.
// Each one held takes UCX's fifo another receive buffer from its pool (through its shared
// memory), which then keeps it: a sender a call ahead with a reduce of 1 GiB would otherwise
// grow that pool by 1 GiB.
inline constexpr std::size_t kHeldEagerBytes = 4 << 20;

// A message being received: kept bytes of an eager one that came before its receive, or the
// descriptor of a rendezvous one, fetched once matched.
struct UcxMessage : transport::Incoming {
  UcxMessage() = default;
  UcxMessage(const UcxMessage&) = delete;
  UcxMessage& operator=(const UcxMessage&) = delete;
  ~UcxMessage() { give_back(); }
  // Gives UCX back what this message holds (its kept buffers, its rendezvous descriptor), and
  // forgets the copies kept.
  void give_back() noexcept;

  void* descriptor = nullptr;   // rendezvous: UCX's, until fetched or released
  std::vector<KeptBytes> kept;  // eager, before its receive, in order
  std::size_t kept_bytes = 0;
  HeldFromWorker* held_from = nullptr;  // set once it holds anything of UCX's before its receive
  // Fetched here when its receive lands as more than a copy (not zeroed: UCX writes it whole).
  std::unique_ptr<char[]> staging;
  void* handle = nullptr;     // UCX's request while fetching
  bool acknowledged = false;  // rendezvous: its sender knows it was fetched (see fetch_done)
  // Announced: its sender waits for a clear-to-send naming `send_id` before its pieces.
  bool announced = false;
  std::uint64_t send_id = 0;
};

// UCX's context, shared by the communicators of a process (creating one loads every UCX
// transport: tens of milliseconds).
class Context;

class UcxTransport final : public Transport {
 public:
  explicit UcxTransport(const TransportSetup& setup);
  ~UcxTransport() override;

  std::string_view name() const override { return "ucx"; }
  void post(const RequestPtr& request) override;
  bool send_now(int peer, std::uint32_t tag, std::uint64_t signature, const void* data,
                std::size_t bytes, bool overwritten) override;
  void progress(Clock::time_point until, Waiting waiting) override;
  bool poll() override { return !failure_ && (turn(), true); }
  void wake() noexcept override;
  std::exception_ptr failure() const override { return failure_; }
  void abort(const std::string& reason, std::uint64_t failed_call) noexcept override;
  PeerFailedCall peer_failed_call() override;
  void leave_call(std::chrono::milliseconds timeout) override;
  bool park() override;
  void take_back() override { parking_.take_back(); }
  bool fans_out() const override { return fans_out_; }
  // Every peer reads across and none is reached through TCP: whole halves by rendezvous
  // (kReductionRendezvousBytes).
  bool reads_reductions_across() const override { return fans_out_ && !parks_; }
  bool small_messages_cheap() const override { return !parks_; }
  // CUDA's device memory, where UCX was built to move it.
  bool takes(const DeviceMemoryInfo& memory) const override;
  std::string pending_state() const override;

  // For UCX's callbacks.
  ucs_status_t arrived(AmId id, const Header& header, void* data, std::size_t length, Arrived how);
  void peer_lost(ucp_ep_h ep, ucs_status_t status);
  void send_done(void* record, ucs_status_t status);
  void fetch_done(UcxMessage* message, ucs_status_t status);

 private:
  // What came ahead of its turn (UCX reordered it), kept until it is due.
  struct Early {
    AmId id;
    Header header;
    std::vector<char> bytes;     // eager
    void* descriptor = nullptr;  // rendezvous
    std::size_t length = 0;
  };
  struct Peer {
    ucp_ep_h ep = nullptr;
    net::Fd pidfd;  // same machine: readable once it has ended
    std::uint64_t next_send = 0, next_receive = 0;
    std::map<std::uint64_t, Early> early;
    // The message whose pieces are coming (see kPieceBytes), until its last.
    std::shared_ptr<UcxMessage> assembling;
    // Announced messages cleared to come, in the order told: kCleared pieces are the front's.
    std::deque<std::shared_ptr<UcxMessage>> cleared;
    bool hello = false;  // its first message: the endpoints both ways are up
    bool queues_sends = false;  // its endpoint may hold completed sends (see sent())
    bool same_machine = false;  // watched through its pidfd
    bool goodbye = false;
    bool farewell = false;  // it answered our goodbye
    bool failed = false;  // for any reason: nothing more is taken from it
    bool lost = false;    // its connection: nothing more can be said to it
    // A rendezvous message fetched from it in this call, its acknowledgement perhaps still
    // queued in this worker (see leave_call()).
    bool fetched = false;
    void* flushing = nullptr;  // UCX's request of leave_call()'s flush, until its callback
    ucs_status_t lost_status = UCS_OK;  // why, until judged (judge_lost_peers)
  };
  // A send in flight: its header (which UCX reads until the send completes) and request,
  // and the callback's arguments (the transport and this record).
  struct Sending {
    Header header{};
    RequestPtr request;
    std::size_t piece_bytes = 0;  // data: of the request's bytes, those this send carries
    int peer = 0;
    std::string text;  // an abort's reason
    std::pair<UcxTransport*, void*> callback{nullptr, nullptr};
    void* handle = nullptr;  // UCX's request, until its callback
    bool flushing = false;   // sent; now until nothing of it waits here (see sent())
  };
  void sent(std::unique_ptr<Sending> record);
  // Whether a send of a message of `bytes` to `p` is done only once the endpoint is flushed
  // (see sent()).
  static bool flushed_after_sending(const Peer& p, std::size_t bytes);

  // `kept`: the handler holds UCX's buffer or descriptor (UCS_INPROGRESS).
  void handle(int peer, AmId id, const Header& header, void* data, std::size_t length,
              Arrived how, bool& kept);
  // Sends an eager message of `id` to `p` where UCX sends it at once (its short protocol: into
  // the peer's fifo, or a socket's buffer), with no record kept: false, sending nothing, where
  // UCX would have to keep it. The header takes the peer's next sequence number.
  bool send_at_once(Peer& p, AmId id, Header header, const void* data, std::size_t bytes);
  // Sends `bytes` of `request`'s from `offset` on, as one active message of `id`.
  void send_data(const RequestPtr& request, std::size_t offset, std::size_t bytes,
                 std::uint32_t flags, AmId id = kData);
  // Sends all of `request`'s bytes eager, in pieces of kPieceBytes, as messages of `id`.
  void send_pieces(const RequestPtr& request, AmId id);
  // A large copy's request-to-send; its pieces go once its receiver clears it (kClear).
  void announce(const RequestPtr& request);
  // `message`, announced by `peer`, met its receive: the sender may send its pieces.
  void clear(int peer, const std::shared_ptr<UcxMessage>& message);
  // A piece of an eager message cut in pieces arrived (`id`: kData, or kCleared for an
  // announced one): it lands in its receive, or is kept.
  void take_piece(int peer, AmId id, const Header& header, void* data, std::size_t length,
                  Arrived how, bool& kept);
  // Keeps eager bytes of `message` until its receive takes them (UCX's buffer, or a copy).
  void keep(const std::shared_ptr<UcxMessage>& message, void* data, std::size_t length,
            Arrived how, bool& kept);
  // Lands what `message` kept in its receive, just posted.
  void land_kept(UcxMessage& message);
  // `peer` sent something else before the last piece of the message it was sending.
  void broke_off(int peer);
  // `data`, or a copy of it in aligned_ when `receive` reduces and UCX's bytes are not
  // aligned for whole elements.
  const void* aligned_for(const Request& receive, const void* data, std::size_t length);
  void fetch(const std::shared_ptr<UcxMessage>& message);
  void start_fetches();
  bool turn();
  void post_recv(const RequestPtr& request);
  void send(std::unique_ptr<Sending> record, AmId id, const void* buffer, std::size_t bytes,
            std::uint32_t flags);
  // A message of `id` to `peer` whose bytes, if any, say nothing (hello, goodbye, farewell).
  void send_word(int peer, AmId id, const void* bytes = nullptr, std::size_t length = 0);
  int peer_of(ucp_ep_h ep) const;
  void check_peers_alive();
  // A connection UCX reported lost (its error handler, or a transfer that failed): the peer is
  // judged by judge_lost_peers(), once what it sent before is read.
  void connection_lost(int peer, ucs_status_t status);
  void judge_lost_peers();
  bool take_last_word(int peer);
  void fail_peer(int peer, const std::exception_ptr& error);
  void fail_peer(int peer, ErrorCode code, const std::string& message);
  // Ends every receive posted and send in flight with `error`.
  void fail_transfers(const std::exception_ptr& error);
  void release(void* descriptor) noexcept;
  // Progresses the worker until nothing is in flight from this rank (`reasons_only`: no abort's
  // reason), or `deadline`.
  void drain_sends(Clock::time_point deadline, bool reasons_only) noexcept;
  // Closes the endpoints, flushing each first unless its peer was lost or it has a transfer in
  // flight (closed at once, which ends it); then waits until the closes, and the transfers
  // they end, are done.
  void close_endpoints(Clock::time_point deadline) noexcept;
  // Whether a send of data to `peer`, or a fetch from it, is in flight (busy: either).
  bool busy(int peer) const;
  bool sending_to(int peer) const;
  bool fetching_from(int peer) const;
  // Setup's last step: a hello each way with every peer, so that UCX's connections are up
  // before any call (closing an endpoint whose wireup is under way trips UCX 1.13).
  void greet_peers(Clock::time_point deadline);
  // Says goodbye (unless aborted), closes every endpoint and the worker.
  void shut_down() noexcept;

  int rank_;
  std::vector<int> peer_ranks_;
  Polling polling_;
  // Whether copies of calls beyond the caches to a peer of this machine are announced
  // (see announce()).
  bool announces_large_copies_;
  std::shared_ptr<Context> context_;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  std::vector<Peer> peers_;
  HeldFromWorker held_from_worker_;  // outlives the messages of matching_
  transport::Matching<UcxMessage> matching_;
  std::map<Sending*, std::unique_ptr<Sending>> sending_;
  std::map<UcxMessage*, std::shared_ptr<UcxMessage>> fetching_;
  // check_peers_alive() at the start of progress() (a syscall per peer) no more often than this.
  Clock::time_point next_alive_check_{};
  std::vector<RequestPtr> pending_failures_;  // transfers that failed, until judged
  std::vector<std::shared_ptr<UcxMessage>> to_fetch_;  // matched, fetched after progress
  // Announced sends, by number, until cleared: the sender's half of the rendezvous bookkeeping
  // verbs keeps too (UCX registers nothing here: each goes with an empty registration). Then
  // cleared, their pieces sent after progress.
  transport::RendezvousBook<> announced_;
  std::vector<RequestPtr> to_stream_;
  std::vector<char> aligned_;  // an eager message reduced from, when UCX's bytes are not aligned
  // Messages held before their receive with UCX's descriptors or buffers: they go back when
  // closing (those of messages gone already went back with them).
  std::vector<std::weak_ptr<UcxMessage>> held_;
  // `message` holds something of UCX's: counted in held_from_worker_, and listed in held_.
  void remember_held(const std::shared_ptr<UcxMessage>& message);
  transport::LastWords last_words_;
  std::exception_ptr failure_;
  PeerFailedCall peer_failed_call_;
  bool aborted_ = false;
  // Aborted with a transfer still in flight: the worker must not move again (abort()).
  bool frozen_ = false;
  // Every peer reads this rank's rendezvous messages from its memory (see greet_peers()).
  bool fans_out_ = false;
  // What UCX calls the active-message handlers back with, by id.
  std::pair<UcxTransport*, AmId> handlers_[kAmIds];
  // Between calls, where a peer is reached over TCP (see park()): `parks_` says so, from setup.
  bool parks_ = false;
  transport::ParkingSpot parking_{[this] { return move_while_parked(); }};
  bool move_while_parked() noexcept;
};

}  // namespace arcoll::ucx
