// Shared-memory transport between ranks of one host.
//
// Each peer writes into a single-producer/single-consumer byte ring in our segment
// (segment.hpp; its records: ring.hpp), and we into one in its. Messages up to
// Options::shm_single_copy_bytes (shm_single_copy_pipelined_bytes for a reduction's or a
// broadcast's, at most 256 KiB for a broadcast passed on down a chain and below 128 KiB for one
// of 2 ranks, within the caches) travel through the ring as fragments (two copies, but no
// system call, in cache; written with streaming stores while the peer's core is far:
// ring_stores.hpp); larger ones travel as a descriptor of the sender's buffer, which the
// receiver reads straight into its destination with process_vm_readv (one copy), sharing the
// copy with the waiting sender where it can (shared_copy.cpp), and acknowledges. A send from memory
// of arcoll::mem_alloc travels as a descriptor of its region: the receiver maps the region once
// (pidfd_getfd) and reads, or reduces, the message in place, with no copy and no system call. Where
// cross-memory attach is denied between any two ranks of the host, either way, every rank sends
// large messages as fragments (segment.hpp); a read refused later fails the call. A wait polls for
// the time its Waiting says (transport.hpp's Polling), then sleeps on the doorbell futex in short
// slices so that a peer's death (seen through its pidfd) is noticed. This header: its peers,
// messages and the transport's class, shared by shm_transport.cpp (sending, waiting, peers'
// liveness) and shm_receive.cpp (delivering what the rings bring).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/base/shared_memory.hpp"
#include "transports/common/matching.hpp"
#include "transports/common/opened_device_memory.hpp"
#include "transports/shm/peer_regions.hpp"
#include "transports/shm/ring.hpp"
#include "transports/shm/ring_stores.hpp"
#include "transports/shm/segment.hpp"
#include "transports/shm/shared_copy.hpp"
#include "transports/transport.hpp"

namespace arcoll::shm {

using net::Clock;

inline constexpr std::size_t kFragmentBytes = 64 * 1024;
// Reducing receives of large messages read the sender's data in pieces of this size, which
// stay in this core's cache between the read and the reduction.
inline constexpr std::size_t kReducePieceBytes = 128 * 1024;

// A message being received. Descriptor messages: where the data lives in the sender, and the
// id to acknowledge.
struct ShmMessage : transport::Incoming {
  bool remote = false;
  bool read_across = false;  // a descriptor's, read with process_vm_readv
  std::uint64_t address = 0;
  std::uint64_t send_id = 0;
  std::optional<SharedRegion> region;  // a shared descriptor's: read in place
  std::optional<DeviceMemoryShare> device;  // a device descriptor's: read from the device
};
using Arrival = transport::Matching<ShmMessage>::Arrival;

// An entry waiting for room in a peer's ring.
struct Outgoing {
  explicit Outgoing(const Entry& e, const char* data = nullptr, RequestPtr r = {},
                    bool last = false)
      : entry(e), payload(data), request(std::move(r)), last_fragment(last) {}
  Entry entry;
  const char* payload = nullptr;
  std::string owned;   // control payloads
  RequestPtr request;  // completes when written (fragments) or acknowledged (descriptors)
  bool last_fragment = false;
};

inline Entry control_entry(EntryKind kind, std::uint64_t id = 0, std::uint32_t payload = 0) {
  return Entry{kind, 0, 0, id, 0, payload, 0, 0};
}

struct Peer {
  void* segment = nullptr;  // the peer's, mapped by Segments (our ring to it is at our rank)
  std::deque<Outgoing> outgoing;
  // Messages with fragments still to come. Those of one tag come one after another; a
  // forwarded send's fragments (written as its receive lands) may come between another tag's.
  std::vector<std::shared_ptr<ShmMessage>> arriving;
  bool parked = false;  // a large message waits for its receive
  std::map<std::uint64_t, RequestPtr> awaiting_ack;
  std::uint64_t next_send_id = 0;
  // Our ring's read position in the peer's segment as last seen: it is read again only when
  // the ring looks full by it, so that a writer does not pull the reader's cache line over
  // on every message.
  std::uint64_t head_seen = 0;
  std::uint64_t tail = 0;  // where our next record in that ring goes
  bool goodbye = false;
  RingStores stores;  // of our larger fragments into that ring
  // We and the peer joined the remote barriers (segment.hpp): what we write for it needs no
  // fence before we look whether it sleeps.
  bool fence_free = false;
};

// Rings the doorbell of `segment`: wakes its owner where it sleeps on it.
void ring_doorbell(void* segment);

class ShmTransport final : public Transport, public SharedBoards {
 public:
  explicit ShmTransport(const TransportSetup& setup);
  ~ShmTransport() override;

  std::string_view name() const override { return "shm"; }
  void post(const RequestPtr& request) override;
  bool send_now(int peer, std::uint32_t tag, std::uint64_t signature, const void* data,
                std::size_t bytes, bool overwritten) override;
  bool receive_now(int peer, std::uint32_t tag, std::uint64_t signature, void* data,
                   std::size_t bytes) override;
  void progress(Clock::time_point until, Waiting waiting) override;
  bool poll() override { return !failure_ && (poll_once(), true); }
  void wake() noexcept override;
  void leave_call(std::chrono::milliseconds timeout) override;
  std::exception_ptr failure() const override { return failure_; }
  void abort(const std::string& reason, std::uint64_t failed_call) noexcept override;
  PeerFailedCall peer_failed_call() override;
  std::string pending_state() const override;
  bool forwards() const override { return true; }
  bool reads_reductions_across() const override { return segments_.every_rank_reads(); }
  bool small_messages_cheap() const override { return true; }
  SharedBoards* boards() override { return peer_ranks_.empty() ? nullptr : this; }
  // Device buffers travel as descriptors of their allocation, opened by the receiver, which
  // copies from the sender's device (CUDA IPC) before it acknowledges.
  bool takes(const DeviceMemoryInfo& memory) const override { return bool(memory.share); }

  std::size_t board_bytes() const override { return kBoardBytes; }
  std::byte* own_board() override { return board_in(own(), size_); }
  const std::byte* board_of(int peer) const override {
    return board_in(segments_.peer(peer).segment.get(), size_);
  }
  void announce_board() override;
  bool await_boards(const std::function<bool()>& ready, Clock::time_point until,
                    Waiting waiting) override;
  bool departed(int peer) const override { return peers_[static_cast<std::size_t>(peer)].goodbye; }

 private:
  // Polls `done()` (for the time `waiting` gets from Polling::span), then sleeps once on
  // our doorbell (until `until`, a slice at most, or the doorbell rings), checks the peers
  // are alive, and says whether it held.
  template <class Done>
  bool await(Done done, Clock::time_point until, Waiting waiting);
  // Moves entries out of our rings and into peers' rings; true when anything moved.
  bool poll_once();
  bool drain_ring(int peer);
  // Hands the ring back up to `head`, waking a writer that waits for room.
  void free_read(Peer& p, Ring* ring, std::uint64_t head);
  bool push_outgoing(int peer);
  // Writes a message of at most `most` bytes into the ring to `p`, where nothing is queued
  // before it and all of it fits: false, touching nothing, where not.
  bool write_whole(Peer& p, std::uint32_t tag, std::uint64_t signature, const void* data,
                   std::size_t bytes, std::size_t most = kFragmentBytes);
  // Whether a record of `record` bytes fits in our ring to `p` at `tail`, with the line after
  // it (which write_entry() clears); when not, the reader is asked to ring our doorbell once
  // it frees space.
  bool has_room(Peer& p, Ring* ring, std::uint64_t tail, std::size_t record);
  // write_entry(), a fragment of RingStores::kTimedBytes or more with the stores the peer's
  // RingStores chooses, timed into it.
  std::uint64_t timed_write(Peer& p, Ring* ring, std::uint64_t tail, const Entry& entry,
                            const void* payload, bool from_memory);
  // Records what was written up to `tail`, waking the reader if it sleeps.
  void publish(Peer& p, std::uint64_t tail);
  void deliver(int peer, const Entry& e, std::uint64_t payload_at);
  // `n` bytes of `m` at `offset` arrived at `src`. A receive that forwards (Request::forward)
  // lands and sends them on at once (forwards_pieces); a message held before its receive
  // came, one whose send is read in place, or one read across whose result the partner reads
  // back across (forwards_whole_across), is sent on whole once it has landed.
  void deliver_piece(ShmMessage& m, std::uint64_t offset, const char* src, std::size_t n);
  // The region of shared memory `send` lies in where the receiver reads it there (a shared
  // descriptor, with no copy through the ring): sends of kSharedDescriptorBytes or more, of
  // calls without streaming stores, to a peer whose core was not far when the call began
  // (RingStores::far, settled between calls: a call's messages to a peer all go one way).
  std::optional<shared_memory::Region> in_place_region(const Request& send) const;
  // Whether `receive` forwards its result piece by piece into the ring as it is reduced: not
  // where its send is read in place, as writing the ring would be a copy more (with the
  // pieces written into the ring, a 1 MiB all-reduce of shared buffers on 2 ranks took 76.7 us
  // at best, against 46.7 us landed and sent whole).
  bool forwards_pieces(const Request& receive) const;
  // Whether the result of `m`, read across, is forwarded whole for the partner to read back
  // across (its forward large enough to go so, the call within the caches): two copies by the
  // kernel and a reduction, where pieces written into the ring take a copy more.
  bool forwards_whole_across(const ShmMessage& m, const Request& receive) const;
  void forward_whole_once_landed(Request& receive);
  // Reduces pieces of a forwarding receive straight into its send's fragments in the ring to
  // the peer, then copies each from there into the receive's buffer (in this core's cache):
  // the result is read once. Where the ring has no room, the piece lands and its fragment
  // waits in the queue, copied from the buffer.
  void land_and_forward(Request& receive, std::uint64_t offset, const char* src, std::size_t n);
  void post_recv(const RequestPtr& request);
  void complete_remote(int peer, const std::shared_ptr<ShmMessage>& m);
  // Reads `n` bytes at `from` in `peer`'s memory into `into`: false, with the peer failed,
  // where they cannot be read.
  bool read_across(int peer, char* into, std::uint64_t from, std::uint64_t n);
  // Whether descriptor message `m`, read straight into its receive buffer, is copied by both
  // ranks (large enough to share).
  bool shares_copy(int peer, const ShmMessage& m) const;
  // The size from which a sender that waits shares the copy of a message of a call whose
  // receivers do `receivers` (shares_copy).
  std::size_t shared_copy_from(Request::Receivers receivers) const;
  // Reads `m` into `into` with its sender's help (shared_copy.cpp): false where the peer failed.
  bool read_with_sender(int peer, const ShmMessage& m, char* into);
  // The sender's side: copies chunks of send `send_id`, from the back, into the buffer of the
  // receiver that offered them, while it has any left to claim.
  void help_receiver(int peer, std::uint64_t send_id);
  // complete_remote() of a device descriptor's message; false where the peer failed.
  bool read_device(int peer, ShmMessage& m);
  // A descriptor entry of `request`'s buffer, which awaits the receiver's acknowledgement.
  static Entry descriptor(EntryKind kind, Peer& p, const RequestPtr& request,
                          std::uint32_t payload);
  void enqueue(int peer, Outgoing out);
  void fail_peer(int peer, ErrorCode code, const std::string& message);
  void fail_peer(int peer, const std::exception_ptr& error);
  void check_peers_alive();
  // Whether `peer`'s goodbye waits in the ring behind a parked message: the peer sent a large
  // message before its receive was posted and left, and all it sent is in the ring.
  bool goodbye_behind_parked(int peer) const;
  // A dead peer's last word: the reason in an abort entry still unread in its ring, if any.
  std::string last_word(int peer) const;
  // Fails `peer` with its last word, where it left one (true).
  bool fail_with_last_word(int peer);
  void fail_dead_peer(int peer, const std::string& what);

  void* own() const { return segments_.own(); }
  // The size past which a send is read across, by what its call's receivers do and whether
  // the call streams its stores.
  std::size_t single_copy_above(Request::Receivers receivers, bool streaming_stores) const;
  // Whether a send of `bytes`, of neither shared nor device memory, goes as a descriptor its
  // receiver reads across processes (above single_copy_above, where cross-memory attach is on).
  bool goes_across(std::size_t bytes, Request::Receivers receivers, bool streaming_stores) const;
  bool goes_across(const Request& send) const {
    return goes_across(send.bytes, send.receivers, send.streaming_stores);
  }

  int rank_;
  int size_;
  std::vector<int> peer_ranks_;  // served by this transport
  Segments segments_;
  std::vector<Peer> peers_;
  transport::Matching<ShmMessage> matching_;
  // Larger messages are read across processes when segments_.cma().
  std::size_t single_copy_bytes_, single_copy_pipelined_bytes_, single_copy_relayed_bytes_;
  // Whether the kernel backs large heap buffers with huge pages unasked (transparent huge
  // pages "always"): a read across then pins a page per 2 MiB, not per 4 KiB.
  bool huge_pages_unasked_;
  std::vector<char> bounce_;  // pieces of reducing receives
  // Reduced pieces forwarded into a ring that is streamed (RingStores): reduced here, in cache,
  // then streamed into the ring and copied into the receive buffer.
  std::vector<char> forward_piece_;
  PeerRegions peer_regions_;
  transport::OpenedDeviceMemory peer_devices_;
  Polling polling_;
  std::chrono::milliseconds timeout_;  // the longest wait for a sender's share of a copy
  bool oversubscribed_;                // more ranks on this host than cores (shares_copy)
  // Whether the kernel's copy across costs more than the rings' two copies (single_copy_above).
  bool rings_beat_reads_across_ = false;
  // Our segment's barriers_before_sleep, and whether every peer is fence_free (boards).
  bool barriers_before_sleep_ = false;
  bool boards_fence_free_ = false;
  // Since the last call: a write timed into some peer's RingStores; a send read in place.
  bool stores_timed_ = false, sent_in_place_ = false;
  // Calls that sent in place, and whether this one sends through the rings instead, to time
  // them (leave_call): reads in place time nothing, and the peer's core may have gone far.
  unsigned calls_in_place_ = 0;
  bool probing_ = false;
  std::atomic<bool> woken_{false};  // see wake()
  // Fragments sent on as forwarding receives landed, by the way they took, and messages read
  // in place: reported when the transport closes (ARCOLL_LOG=debug), where a forwarded call
  // that is slow shows why.
  struct Forwarded {
    std::size_t written = 0;  // reduced straight into the ring to the peer
    std::size_t queued = 0;   // landed, then queued behind a full ring
    // Messages sent on once landed: held before their receive, or read in place by the peer.
    std::size_t whole = 0;
    std::size_t read_in_place = 0;  // messages read out of a peer's shared memory
    std::size_t read_across = 0;    // messages read from a peer's memory (process_vm_readv)
    // Of those, copied with their senders (shared_copy.cpp), and the chunks each side took.
    std::size_t shared = 0, chunks_read = 0, chunks_by_senders = 0;
  } forwarded_;
  std::exception_ptr failure_;
  bool aborted_ = false;
};

}  // namespace arcoll::shm
