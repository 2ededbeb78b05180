// Shared-memory transport between ranks of one host.
//
// Each peer writes into a single-producer/single-consumer byte ring in our segment
// (segment.hpp; its records: ring.hpp), and we into one in its. Messages up to
// Options::shm_single_copy_bytes travel through the ring as fragments (two copies, but no
// system call, in cache); larger ones travel as a descriptor of the sender's buffer, which the
// receiver reads straight into its destination with process_vm_readv (one copy) and
// acknowledges. A send from memory of arcoll::mem_alloc travels as a descriptor of its region:
// the receiver maps the region once (pidfd_getfd) and reads, or reduces, the message in place,
// with no copy and no system call.
// When cross-memory attach is denied, large messages fall back to fragments. Waiting polls
// briefly, then sleeps on the doorbell futex in short slices so that a peer's death (seen
// through its pidfd) is noticed.
#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>

#include "arcoll/error.hpp"
#include "base/reduce.hpp"
#include "base/shared_memory.hpp"
#include "transports/common/matching.hpp"
#include "transports/shm/peer_regions.hpp"
#include "transports/shm/ring.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace arcoll::shm {
namespace {

using net::Clock;

constexpr std::size_t kFragmentBytes = 64 * 1024;
// Reducing receives of large messages read the sender's data in pieces of this size, which
// stay in this core's cache between the read and the reduction.
constexpr std::size_t kReducePieceBytes = 128 * 1024;
constexpr auto kSleepSlice = std::chrono::milliseconds(20);

// Sends from shared memory of at least this size travel as shared descriptors: below it a
// fragment's copy costs less than the descriptor's round trip.
constexpr std::size_t kSharedDescriptorBytes = 16 * 1024;

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                std::chrono::nanoseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1'000'000'000),
              static_cast<long>(timeout.count() % 1'000'000'000)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}

void futex_wake(std::atomic<std::uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
}

// A message being received. Descriptor messages: where the data lives in the sender, and the
// id to acknowledge.
struct ShmMessage : transport::Incoming {
  bool remote = false;
  std::uint64_t address = 0;
  std::uint64_t send_id = 0;
  std::optional<SharedRegion> region;  // a shared descriptor's: read in place
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

Entry control_entry(EntryKind kind, std::uint64_t id = 0, std::uint32_t payload = 0) {
  return Entry{kind, 0, 0, id, 0, payload, 0, 0};
}

struct Peer {
  void* segment = nullptr;  // the peer's, mapped by Segments (our ring to it is at our rank)
  std::deque<Outgoing> outgoing;
  // Messages with fragments still to come. Those of one tag come one after another; a
  // forwarded send's fragments (written as its receive lands) may come between another tag's.
  std::vector<std::shared_ptr<ShmMessage>> arriving;
  bool parked = false;                // a large message waits for its receive
  std::map<std::uint64_t, RequestPtr> awaiting_ack;
  std::uint64_t next_send_id = 0;
  // Our ring's read position in the peer's segment as last seen: it is read again only when
  // the ring looks full by it, so that a writer does not pull the reader's cache line over
  // on every message.
  std::uint64_t head_seen = 0;
  std::uint64_t tail = 0;  // where our next record in that ring goes
  bool goodbye = false;
};

class ShmTransport final : public Transport, public SharedBoards {
 public:
  explicit ShmTransport(const TransportSetup& setup);
  ~ShmTransport() override;

  std::string_view name() const override { return "shm"; }
  void post(const RequestPtr& request) override;
  void progress(Clock::time_point until, Waiting waiting) override;
  void wake() noexcept override;
  std::exception_ptr failure() const override { return failure_; }
  void abort(const std::string& reason) noexcept override;
  std::string pending_state() const override;
  bool forwards() const override { return true; }
  SharedBoards* boards() override { return peer_ranks_.empty() ? nullptr : this; }

  std::size_t board_bytes() const override { return kBoardBytes; }
  std::byte* own_board() override { return board_in(own(), size_); }
  const std::byte* board_of(int peer) const override {
    return board_in(segments_.peer(peer).segment.get(), size_);
  }
  void announce_board() override;
  bool await_boards(const std::function<bool()>& ready, Clock::time_point until) override;
  bool departed(int peer) const override { return peers_[static_cast<std::size_t>(peer)].goodbye; }

 private:
  // Polls `done()` (for the busy-poll time unless `waiting` says sleep), then sleeps once on
  // our doorbell (until `until`, a slice at most, or the doorbell rings), checks the peers
  // are alive, and says whether it held.
  template <class Done>
  bool await(Done done, Clock::time_point until, Waiting waiting);
  // Moves entries out of our rings and into peers' rings; true when anything moved.
  bool poll_once();
  bool drain_ring(int peer);
  bool push_outgoing(int peer);
  // Whether a record of `record` bytes fits in our ring to `p` at `tail`, with the line after
  // it (which write_entry() clears); when not, the reader is asked to ring our doorbell once
  // it frees space.
  bool has_room(Peer& p, Ring* ring, std::uint64_t tail, std::size_t record);
  // Writes an entry into a ring at `tail` and its payload after it, which `put(destination,
  // offset, length)` writes (ring_write), its kind last; the new tail.
  template <class Put>
  static std::uint64_t write_entry_with(Ring* ring, std::uint64_t tail, const Entry& entry,
                                        Put&& put);
  // `from_memory`: the payload is a piece of a buffer larger than the caches.
  static std::uint64_t write_entry(Ring* ring, std::uint64_t tail, const Entry& entry,
                                   const void* payload, bool from_memory = false);
  // Records what was written up to `tail`, waking the reader if it sleeps.
  void publish(Peer& p, std::uint64_t tail);
  void deliver(int peer, const Entry& e, std::uint64_t payload_at);
  // `n` bytes of `m` at `offset` arrived at `src`. A receive that forwards (Request::forward)
  // lands and sends them on at once; a message held before its receive came is sent on whole
  // once it has landed.
  void deliver_piece(ShmMessage& m, std::uint64_t offset, const char* src, std::size_t n);
  void forward_whole_once_landed(Request& receive);
  // Reduces pieces of a forwarding receive straight into its send's fragments in the ring to
  // the peer, then copies each from there into the receive's buffer (in this core's cache):
  // the result is read once. Where the ring has no room, the piece lands and its fragment
  // waits in the queue, copied from the buffer.
  void land_and_forward(Request& receive, std::uint64_t offset, const char* src, std::size_t n);
  void post_recv(const RequestPtr& request);
  void complete_remote(int peer, const std::shared_ptr<ShmMessage>& m);
  // A descriptor entry of `request`'s buffer, which awaits the receiver's acknowledgement.
  static Entry descriptor(EntryKind kind, Peer& p, const RequestPtr& request,
                          std::uint32_t payload);
  void enqueue(int peer, Outgoing out);
  void fail_peer(int peer, ErrorCode code, const std::string& message);
  void fail_peer(int peer, const std::exception_ptr& error);
  void check_peers_alive();
  // A dead peer's last word: the reason in an abort entry still unread in its ring, if any.
  std::string last_word(int peer) const;
  void fail_dead_peer(int peer, const std::string& what);

  void* own() const { return segments_.own(); }

  int rank_;
  int size_;
  std::vector<int> peer_ranks_;  // served by this transport
  Segments segments_;
  std::vector<Peer> peers_;
  transport::Matching<ShmMessage> matching_;
  // Larger messages are read across processes when segments_.cma().
  std::size_t single_copy_bytes_;
  std::vector<char> bounce_;  // pieces of reducing receives
  PeerRegions peer_regions_;
  std::chrono::microseconds busy_poll_;
  bool poll_yields_;
  std::atomic<bool> woken_{false};  // see wake()
  std::exception_ptr failure_;
  bool aborted_ = false;
};

ShmTransport::ShmTransport(const TransportSetup& setup)
    : rank_(setup.rank),
      size_(setup.size),
      peer_ranks_(setup.peers),
      segments_(setup, setup.options->shm_single_copy),
      peers_(static_cast<std::size_t>(setup.size)),
      matching_(setup.size, [this](int peer, std::exception_ptr e) { fail_peer(peer, e); }),
      single_copy_bytes_(setup.options->shm_single_copy_bytes),
      busy_poll_(setup.busy_poll),
      poll_yields_(setup.poll_yields) {
  for (int p : peer_ranks_)
    peers_[static_cast<std::size_t>(p)].segment = segments_.peer(p).segment.get();
}

ShmTransport::~ShmTransport() {
  if (!aborted_ && !peer_ranks_.empty()) {
    for (int p : peer_ranks_)
      if (!failure_) enqueue(p, Outgoing(control_entry(EntryKind::goodbye)));
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < deadline &&
           std::any_of(peers_.begin(), peers_.end(),
                       [](const Peer& p) { return !p.outgoing.empty(); }) &&
           !failure_) {
      if (!poll_once()) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void ShmTransport::enqueue(int peer, Outgoing out) {
  peers_[static_cast<std::size_t>(peer)].outgoing.push_back(std::move(out));
  push_outgoing(peer);
}

void ShmTransport::post(const RequestPtr& request) {
  if (!std::binary_search(peer_ranks_.begin(), peer_ranks_.end(), request->peer))
    throw InvalidArgument("shm", "no connection to rank " + std::to_string(request->peer), rank_);
  if (failure_) {
    request->error = failure_;
    request->done = true;
    return;
  }
  Peer& p = peers_[static_cast<std::size_t>(request->peer)];
  if (request->kind == Request::Kind::recv) {
    post_recv(request);
    return;
  }
  if (request->bytes >= kSharedDescriptorBytes && segments_.cma()) {
    if (const auto region = shared_memory::find(request->buffer, request->bytes)) {
      const SharedRegion wire{region->id, reinterpret_cast<std::uint64_t>(region->base),
                              region->bytes, region->fd, 0};
      Outgoing out(descriptor(EntryKind::shared_descriptor, p, request, sizeof wire));
      out.owned.assign(reinterpret_cast<const char*>(&wire), sizeof wire);
      enqueue(request->peer, std::move(out));
      return;
    }
  }
  if (request->bytes > single_copy_bytes_ && segments_.cma()) {
    enqueue(request->peer, Outgoing(descriptor(EntryKind::descriptor, p, request, 0)));
    return;
  }
  const auto* data = static_cast<const char*>(request->buffer);
  if (request->bytes <= kFragmentBytes && p.outgoing.empty()) {
    // Nothing queued before it: a one-fragment message goes straight into the ring.
    Ring* ring = ring_of(p.segment, rank_);
    const Entry entry{EntryKind::fragment, request->tag,  request->bytes, 0, 0,
                      static_cast<std::uint32_t>(request->bytes), 0, request->signature};
    if (has_room(p, ring, p.tail, record_bytes(entry.payload))) {
      publish(p, write_entry(ring, p.tail, entry, data));
      request->transferred = request->bytes;
      request->done = true;
      return;
    }
  }
  std::uint64_t offset = 0;
  do {
    const auto n = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(kFragmentBytes, request->bytes - offset));
    p.outgoing.emplace_back(Entry{EntryKind::fragment, request->tag, request->bytes, offset, 0, n,
                                  0, request->signature},
                            data + offset, request, offset + n == request->bytes);
    offset += n;
  } while (offset < request->bytes);
  push_outgoing(request->peer);
}

Entry ShmTransport::descriptor(EntryKind kind, Peer& p, const RequestPtr& request,
                               std::uint32_t payload) {
  const std::uint64_t id = p.next_send_id++;
  p.awaiting_ack[id] = request;
  const auto address = reinterpret_cast<std::uint64_t>(request->buffer);
  return Entry{kind, request->tag, request->bytes, id, address, payload, 0, request->signature};
}

bool ShmTransport::push_outgoing(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.outgoing.empty() || p.segment == nullptr) return false;
  Ring* ring = ring_of(p.segment, rank_);
  bool moved = false;
  std::uint64_t tail = p.tail;
  while (!p.outgoing.empty()) {
    Outgoing& out = p.outgoing.front();
    if (!has_room(p, ring, tail, record_bytes(out.entry.payload))) break;
    tail = write_entry(ring, tail, out.entry, out.payload ? out.payload : out.owned.data(),
                       out.request && out.request->streaming_stores);
    if (out.request && out.entry.kind == EntryKind::fragment) {
      out.request->transferred += out.entry.payload;
      if (out.last_fragment) out.request->done = true;
    }
    p.outgoing.pop_front();
    moved = true;
  }
  if (moved) publish(p, tail);
  return moved;
}

bool ShmTransport::has_room(Peer& p, Ring* ring, std::uint64_t tail, std::size_t record) {
  const std::size_t need = record + kLineBytes;
  if (tail + need - p.head_seen <= kRingBytes) return true;
  p.head_seen = ring->head.load(std::memory_order_acquire);
  if (tail + need - p.head_seen <= kRingBytes) return true;
  ring->writer_waiting.store(1, std::memory_order_seq_cst);
  // Re-check: the reader may have freed space before seeing the flag.
  p.head_seen = ring->head.load(std::memory_order_seq_cst);
  return tail + need - p.head_seen <= kRingBytes;
}

// Buffers larger than the caches are read page by page, a page ahead: the hardware's
// prefetchers stop at each 4 KiB page, and each new page of the stream would start with
// misses to memory (measured: 5-10 % of a 32-128 MiB all-reduce, for the copies into the
// ring and again for the reductions). In cache the prefetches only cost (2 MiB: 3 % slower).
constexpr std::size_t kPageBytes = 4096;

// Asks for the 4 KiB of a stream that follow the 4 KiB at `at` (prefetches never fault, even
// past a buffer's end).
void prefetch_next_page(const char* at) {
  for (std::size_t line = 0; line < kPageBytes; line += kLineBytes)
    __builtin_prefetch(at + kPageBytes + line, 0, 3);
}

void copy_from_memory(char* dst, const char* src, std::size_t bytes) {
  for (std::size_t at = 0; at < bytes; at += kPageBytes) {
    prefetch_next_page(src + at);
    std::memcpy(dst + at, src + at, std::min(kPageBytes, bytes - at));
  }
}

std::uint64_t ShmTransport::write_entry(Ring* ring, std::uint64_t tail, const Entry& entry,
                                        const void* payload, bool from_memory) {
  return write_entry_with(ring, tail, entry,
                          [&](char* dst, std::size_t offset, std::size_t length) {
                            const char* src = static_cast<const char*>(payload) + offset;
                            if (from_memory)
                              copy_from_memory(dst, src, length);
                            else
                              std::memcpy(dst, src, length);
                          });
}

template <class Put>
std::uint64_t ShmTransport::write_entry_with(Ring* ring, std::uint64_t tail, const Entry& entry,
                                             Put&& put) {
  const std::uint64_t next = tail + record_bytes(entry.payload);
  std::atomic_ref<EntryKind>(entry_at(ring, next)->kind).store(EntryKind::none,
                                                               std::memory_order_relaxed);
  Entry* slot = entry_at(ring, tail);  // records start on lines: an entry never wraps
  constexpr std::size_t kAfterKind = sizeof(EntryKind);
  std::memcpy(reinterpret_cast<char*>(slot) + kAfterKind,
              reinterpret_cast<const char*>(&entry) + kAfterKind, sizeof(Entry) - kAfterKind);
  if (entry.payload != 0) ring_write(ring, tail + sizeof(Entry), entry.payload, put);
  std::atomic_ref<EntryKind>(slot->kind).store(entry.kind, std::memory_order_release);
  return next;
}

void ring_if_sleeping(void* segment) {
  // The doorbell rings only for a reader that said it sleeps. It says so before its last look
  // at what it waits for, and the writer looks at its word after writing (with a fence before):
  // one of the two sees the other.
  SegmentHeader* h = header_of(segment);
  if (h->sleeping.load(std::memory_order_relaxed) != 0) {
    h->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(&h->doorbell);
  }
}

void ShmTransport::publish(Peer& p, std::uint64_t tail) {
  p.tail = tail;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ring_if_sleeping(p.segment);
}

void ShmTransport::announce_board() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (int p : peer_ranks_) ring_if_sleeping(peers_[static_cast<std::size_t>(p)].segment);
}

// Reads the entries a peer wrote into our ring, as far as they can be delivered.
bool ShmTransport::drain_ring(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.parked) return false;
  Ring* ring = ring_of(own(), peer);
  std::uint64_t head = ring->head.load(std::memory_order_relaxed);
  bool moved = false;
  while (!p.parked && !failure_) {
    const EntryKind kind = kind_at(ring, head);
    if (kind == EntryKind::none) break;
    Entry e;
    std::memcpy(&e, entry_at(ring, head), sizeof e);
    e.kind = kind;
    deliver(peer, e, head + sizeof(Entry));
    if (p.parked) break;  // the entry stays until its receive is posted
    head += record_bytes(e.payload);
    moved = true;
  }
  if (moved) {
    ring->head.store(head, std::memory_order_seq_cst);
    // Looked at before it is cleared: the exchange would take the writer's cache line.
    if (ring->writer_waiting.load(std::memory_order_seq_cst) != 0 &&
        ring->writer_waiting.exchange(0, std::memory_order_seq_cst) != 0) {
      SegmentHeader* h = header_of(p.segment);
      h->doorbell.fetch_add(1, std::memory_order_seq_cst);
      futex_wake(&h->doorbell);
    }
  }
  return moved;
}

void ShmTransport::deliver(int peer, const Entry& e, std::uint64_t payload_at) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  Ring* ring = ring_of(own(), peer);
  switch (e.kind) {
    case EntryKind::goodbye:
      p.goodbye = true;
      return;
    case EntryKind::abort: {
      std::string text(std::min<std::uint32_t>(e.payload, 4096), '\0');
      ring_copy_out(ring, payload_at, text.data(), text.size());
      fail_peer(peer, ErrorCode::peer_failure,
                "rank " + std::to_string(peer) + " aborted: " + text);
      return;
    }
    case EntryKind::ack: {
      auto it = p.awaiting_ack.find(e.offset);
      if (it == p.awaiting_ack.end()) {
        fail_peer(peer, ErrorCode::protocol, "acknowledgement of an unknown send");
        return;
      }
      it->second->transferred = it->second->bytes;
      it->second->done = true;
      p.awaiting_ack.erase(it);
      return;
    }
    case EntryKind::descriptor:
    case EntryKind::shared_descriptor:
    case EntryKind::fragment:
      break;
    default:
      fail_peer(peer, ErrorCode::protocol, "unknown entry in the shared ring");
      return;
  }
  const bool described = e.kind == EntryKind::descriptor || e.kind == EntryKind::shared_descriptor;
  const bool first = described || e.offset == 0;
  if (first && e.kind == EntryKind::fragment && e.payload == e.message_bytes &&
      matching_.arrive_whole(peer, e.tag, e.signature, e.message_bytes, [&](Request& receive) {
        ring_read(ring, payload_at, e.payload,
                  [&](const char* src, std::size_t offset, std::size_t length) {
                    if (receive.forward)
                      land_and_forward(receive, offset, src, length);
                    else
                      transport::land(receive, offset, src, length);
                  });
      }))
    return;
  if (first) {
    auto m = std::make_shared<ShmMessage>();
    m->tag = e.tag;
    m->signature = e.signature;
    m->bytes = e.message_bytes;
    m->remote = described;
    m->address = e.address;
    m->send_id = e.offset;
    if (e.kind == EntryKind::shared_descriptor) {
      SharedRegion region;
      if (e.payload != sizeof region) {
        fail_peer(peer, ErrorCode::protocol, "malformed shared-memory descriptor");
        return;
      }
      ring_copy_out(ring, payload_at, &region, sizeof region);
      if (e.address < region.base || e.address - region.base > region.bytes ||
          e.message_bytes > region.bytes - (e.address - region.base)) {
        fail_peer(peer, ErrorCode::protocol, "shared-memory descriptor outside its region");
        return;
      }
      m->region = region;
    }
    switch (matching_.arrive(peer, m, m->remote)) {
      case Arrival::failed:
        return;
      case Arrival::park:
        p.parked = true;  // leave it in the ring until its receive is posted
        return;
      case Arrival::matched:
        if (m->remote) complete_remote(peer, m);
        break;
      case Arrival::held:
        break;
    }
    if (m->remote) return;  // read from the sender once a receive takes it
    p.arriving.push_back(m);
  }
  // A first fragment's message is the last one in; a later one's, the first of its tag.
  const auto of_tag =
      first ? std::prev(p.arriving.end())
            : std::find_if(p.arriving.begin(), p.arriving.end(),
                           [&](const auto& m) { return m->tag == e.tag; });
  if (of_tag == p.arriving.end() || e.offset + e.payload > (*of_tag)->bytes) {
    fail_peer(peer, ErrorCode::protocol, "fragment outside its message");
    return;
  }
  ShmMessage& m = **of_tag;  // delivering changes no peer's list of arriving messages
  ring_read(ring, payload_at, e.payload,
            [&](const char* src, std::size_t offset, std::size_t length) {
              deliver_piece(m, e.offset + offset, src, length);
            });
  if (m.received == m.bytes) p.arriving.erase(of_tag);
}

void ShmTransport::deliver_piece(ShmMessage& m, std::uint64_t offset, const char* src,
                                 std::size_t n) {
  Request* receive = m.request.get();  // kept by the message after its last piece
  if (receive && receive->forward && !m.holding) {
    land_and_forward(*receive, offset, src, n);
    matching_.delivered(m, n);
    return;
  }
  matching_.deliver(m, offset, src, n);
  if (receive != nullptr) forward_whole_once_landed(*receive);
}

void ShmTransport::forward_whole_once_landed(Request& receive) {
  if (receive.forward && receive.done && !receive.error) post(receive.forward);
}

void ShmTransport::land_and_forward(Request& receive, std::uint64_t offset, const char* src,
                                    std::size_t n) {
  const RequestPtr& send = receive.forward;
  Peer& q = peers_[static_cast<std::size_t>(send->peer)];
  Ring* ring = ring_of(q.segment, rank_);
  const Request::Landing& l = *receive.landing;
  const auto* with = static_cast<const char*>(l.with);
  auto* landed = static_cast<char*>(receive.buffer);
  const std::size_t element = size_of(l.type);
  const auto stores =
      receive.streaming_stores ? kernels::Stores::streaming : kernels::Stores::by_size;
  for (std::size_t done = 0; done < n;) {
    const auto piece = static_cast<std::uint32_t>(std::min(kFragmentBytes, n - done));
    const std::uint64_t at = offset + done;
    const Entry entry{EntryKind::fragment, send->tag, send->bytes, at, 0, piece, 0,
                      send->signature};
    const bool last = at + piece == send->bytes;
    // Behind queued entries, it waits its turn: fragments of one message stay in order.
    if (q.outgoing.empty() && has_room(q, ring, q.tail, record_bytes(piece))) {
      auto reduce_and_copy = [&](char* dst, std::size_t o, std::size_t length) {
        // A streaming call's `with` comes from memory: page by page (copy_from_memory).
        const std::size_t step = receive.streaming_stores ? kPageBytes : length;
        for (std::size_t sub = 0; sub < length; sub += step) {
          const std::size_t n = std::min(step, length - sub);
          const char* w = with + at + o + sub;
          if (receive.streaming_stores) prefetch_next_page(w);
          kernels::reduce(dst + sub, w, src + done + o + sub, n / element, l.type, l.op);
          kernels::copy(landed + at + o + sub, dst + sub, n, stores);
        }
      };
      publish(q, write_entry_with(ring, q.tail, entry, reduce_and_copy));
      send->transferred += piece;
      if (last) send->done = true;
    } else {
      transport::land(receive, at, src + done, piece);
      q.outgoing.emplace_back(entry, landed + at, send, last);
    }
    done += piece;
  }
}

// Reads a descriptor message from the sender's memory: straight into the receive buffer, or,
// for a reducing receive, piece by piece through a buffer small enough to stay in cache.
void ShmTransport::complete_remote(int peer, const std::shared_ptr<ShmMessage>& m) {
  if (m->region) {
    // Where the region cannot be mapped, the message is read across processes below.
    if (const char* base = peer_regions_.map(peer, segments_.peer(peer).pidfd.get(), *m->region)) {
      deliver_piece(*m, 0, base + (m->address - m->region->base), m->bytes);
      enqueue(peer, Outgoing(control_entry(EntryKind::ack, m->send_id)));
      return;
    }
  }
  const int pid = segments_.peer(peer).pid;
  char* straight = matching_.direct(*m, 0);
  const std::uint64_t piece = straight != nullptr ? m->bytes : kReducePieceBytes;
  if (straight == nullptr) bounce_.resize(kReducePieceBytes);
  for (std::uint64_t at = 0; at < m->bytes; at += piece) {
    const std::uint64_t n = std::min(piece, m->bytes - at);
    char* into = straight != nullptr ? straight + at : bounce_.data();
    for (std::uint64_t done = 0; done < n;) {
      iovec local{into + done, n - done};
      iovec remote{reinterpret_cast<void*>(m->address + at + done), n - done};
      ssize_t got = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
      if (got <= 0) {
        fail_dead_peer(peer,
                       "its buffer could not be read (" + std::string(std::strerror(errno)) + ")");
        return;
      }
      done += static_cast<std::uint64_t>(got);
    }
    if (straight != nullptr)
      matching_.delivered(*m, n);
    else
      deliver_piece(*m, at, into, n);
  }
  enqueue(peer, Outgoing(control_entry(EntryKind::ack, m->send_id)));
}

void ShmTransport::post_recv(const RequestPtr& request) {
  const int peer = request->peer;
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (std::shared_ptr<ShmMessage> m = matching_.post(request)) {
    // A held message: complete, still arriving (the rest lands on its own), or a descriptor.
    if (m->remote)
      complete_remote(peer, m);
    else
      forward_whole_once_landed(*request);
    return;
  }
  if (request->done) return;  // it met a message of another call
  if (p.goodbye) {
    fail_peer(peer, ErrorCode::peer_failure,
              "rank " + std::to_string(peer) + " destroyed its communicator before sending " +
                  request->describe());
    return;
  }
  if (p.parked) {
    p.parked = false;  // the parked message is looked at again
    drain_ring(peer);
  }
}

bool ShmTransport::poll_once() {
  bool moved = false;
  for (int p : peer_ranks_) {
    moved |= push_outgoing(p);
    moved |= drain_ring(p);
  }
  return moved;
}

void ShmTransport::progress(Clock::time_point until, Waiting waiting) {
  if (peer_ranks_.empty() || failure_) return;
  await([this] { return poll_once(); }, until, waiting);
}

bool ShmTransport::await_boards(const std::function<bool()>& ready, Clock::time_point until) {
  // The rings are polled too: a peer's abort arrives there.
  return await([&] { return ready() || (poll_once(), failure_ != nullptr); }, until,
               Waiting::poll_first) &&
         ready();
}

template <class Done>
bool ShmTransport::await(Done done, Clock::time_point until, Waiting waiting) {
  if (done()) return true;
  // The clock is read once every few polls, as a read costs more than a poll; but after every
  // poll that yields the core, which may not come back for a while.
  const unsigned polls_per_clock_read = poll_yields_ ? 1 : 16;
  const auto spin_end =
      std::min(until, Clock::now() + (waiting == Waiting::sleep ? Clock::duration{} : busy_poll_));
  for (unsigned polls = 1; polls % polls_per_clock_read != 0 || Clock::now() < spin_end;
       ++polls) {
    if (poll_yields_) std::this_thread::yield();
    if (done()) return true;
  }
  SegmentHeader* h = header_of(own());
  const std::uint32_t seen = h->doorbell.load(std::memory_order_seq_cst);
  h->sleeping.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ring_if_sleeping()'s
  // A wake() before `seen` was read is in woken_; one after it changed the doorbell.
  bool held = done();
  if (!held && !woken_.exchange(false)) {
    const auto left = until - Clock::now();
    if (left > std::chrono::nanoseconds(0))
      futex_wait(&h->doorbell, seen, std::min<std::chrono::nanoseconds>(left, kSleepSlice));
  }
  h->sleeping.store(0, std::memory_order_seq_cst);
  held = held || done();
  check_peers_alive();
  return held;
}

void ShmTransport::wake() noexcept {
  if (peer_ranks_.empty()) return;  // progress() never sleeps: no segment of its own
  woken_.store(true);
  SegmentHeader* h = header_of(own());
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&h->doorbell);
}

void ShmTransport::check_peers_alive() {
  for (int r : peer_ranks_) {
    PeerSegment& mapped = segments_.peer(r);
    if (!mapped.pidfd || failure_) continue;
    pollfd pfd{mapped.pidfd.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 0) <= 0) continue;
    drain_ring(r);  // a goodbye written just before exiting counts
    if (peers_[static_cast<std::size_t>(r)].goodbye) {
      mapped.pidfd.reset();
      continue;
    }
    fail_dead_peer(r,
                   "its process " + std::to_string(mapped.pid) + " ended without saying goodbye");
  }
}

std::string ShmTransport::last_word(int peer) const {
  const Ring* ring = ring_of(own(), peer);
  const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
  for (std::uint64_t at = head; at - head < kRingBytes && kind_at(ring, at) != EntryKind::none;) {
    Entry e;
    std::memcpy(&e, entry_at(ring, at), sizeof e);
    if (e.kind == EntryKind::abort) {
      std::string text(std::min<std::uint32_t>(e.payload, 4096), '\0');
      ring_copy_out(ring, at + sizeof(Entry), text.data(), text.size());
      return text;
    }
    at += record_bytes(e.payload);
  }
  return {};
}

void ShmTransport::fail_dead_peer(int peer, const std::string& what) {
  // A peer that failed first and then exited said why in its abort entry: report that.
  if (std::string reason = last_word(peer); !reason.empty()) {
    fail_peer(peer, ErrorCode::peer_failure,
              "rank " + std::to_string(peer) + " aborted: " + reason);
    return;
  }
  fail_peer(
      peer, ErrorCode::peer_failure,
      "rank " + std::to_string(peer) + " is gone: " + what + "; it exited, crashed or was killed");
}

void ShmTransport::fail_peer(int peer, ErrorCode code, const std::string& message) {
  fail_peer(peer, make_error(code, "shm", message, rank_, peer));
}

// One peer's failure fails the transport: every transfer in flight, to any peer.
void ShmTransport::fail_peer(int, const std::exception_ptr& error) {
  if (!failure_) failure_ = error;
  auto fail = [&](const RequestPtr& r) {
    if (r && !r->done) {
      r->error = error;
      r->done = true;
    }
  };
  for (int r : peer_ranks_) {
    Peer& p = peers_[static_cast<std::size_t>(r)];
    matching_.fail(r, error);
    for (auto& [id, request] : p.awaiting_ack) fail(request);
    for (auto& out : p.outgoing) fail(out.request);
  }
}

void ShmTransport::abort(const std::string& reason) noexcept {
  if (aborted_ || peer_ranks_.empty()) return;
  aborted_ = true;
  const std::string text = reason.substr(0, 4096);
  for (int r : peer_ranks_) {
    Peer& p = peers_[static_cast<std::size_t>(r)];
    if (p.segment == nullptr) continue;
    p.outgoing.clear();
    Outgoing out(control_entry(EntryKind::abort, 0, static_cast<std::uint32_t>(text.size())));
    out.owned = text;
    p.outgoing.push_back(std::move(out));
    push_outgoing(r);
  }
}

std::string ShmTransport::pending_state() const {
  std::string text;
  for (int r : peer_ranks_) {
    const Peer& p = peers_[static_cast<std::size_t>(r)];
    if (matching_.idle(r) && p.outgoing.empty() && p.awaiting_ack.empty()) continue;
    text += "rank " + std::to_string(r) + ": " + matching_.pending_state(r) + ", " +
            std::to_string(p.outgoing.size()) + " entries to write, " +
            std::to_string(p.awaiting_ack.size()) + " sends awaiting their reader" +
            (p.parked ? ", ring parked" : "") + "\n";
  }
  return text;
}

// Preferred within a host. Its costs were measured with `arbench tune --np 2` on a 2-core
// x86-64 host.
const TransportRegistrar kShmRegistration{{
    .name = "shm",
    .summary = "shared-memory rings between ranks of one host, large messages read with "
               "process_vm_readv (one copy)",
    .reach = Reach::same_host,
    .preference = 100,
    .default_costs = {.latency_us = 1.2, .bandwidth_gbs = 7.0, .reduce_gbs = 5.6},
    .create = [](const TransportSetup& setup) { return std::make_unique<ShmTransport>(setup); }}};

}  // namespace
}  // namespace arcoll::shm
