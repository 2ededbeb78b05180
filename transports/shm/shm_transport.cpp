// The shm transport (shm_transport.hpp): sending into the peers' rings, waiting (polling, then
// the doorbell futex), the peers' liveness and failures. What the rings bring is delivered in
// shm_receive.cpp.
#include <linux/futex.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "src/base/shared_memory.hpp"
#include "transports/common/huge_pages.hpp"
#include "transports/shm/cross_memory_cost.hpp"
#include "transports/shm/shm_transport.hpp"

namespace arcoll::shm {
namespace {

constexpr auto kSleepSlice = std::chrono::milliseconds(20);

// Sends from shared memory of at least this size travel as shared descriptors, read in place
// by the receiver: smaller ones are faster sent as any other message (copied through the
// ring, which the receiver reads while the sender still writes). 2-rank all-reduces of shared
// buffers whose halves go in one message, through the ring against read in place: 16.3
// against 20.1 us at 256 KiB (128 KiB messages), 34.0 against 38.2 us at 512 KiB; at 1 MiB
// (512 KiB messages), read in place 46 us, where heap buffers take 59. Calls with streaming
// stores (larger than the caches) are sent as any other as well: read in place, the sender's
// buffer is read from memory twice (64 MiB: 10.3 against 9.1 ms).
constexpr std::size_t kSharedDescriptorBytes = 512 * 1024;

// A relayed broadcast's messages (Request::Receivers::relayed) larger than this (or than the
// pipelined limit, when lower) are read across: a relaying rank copies a message through the
// ring out of it and into the next one, two passes where a read across is one. Not beyond the
// caches (streaming stores), where the rings' stores skip the reads for ownership that the
// kernel's copy of a read across pays. 4 ranks on 2 cores of an Intel Xeon (two a core),
// chunks of 512 KiB, out of place, us through the rings -> read across: 1 MiB 253 -> 189,
// 4 MiB 1140 -> 824; 32 MiB 13368-15154 -> 15683-16880, 64 MiB 29514-31928 -> 33384-35767.
// A whole message of 64 KiB read across took twice as long (14.6 -> 28.9 us); the limit lies
// between the sizes measured, not at a measured crossing.
constexpr std::size_t kRelayedSingleCopyBytes = 256 * 1024;

// A message whose copy no sender shares goes through the rings where the kernel's copy across
// costs more than this many copies in user space: the rings' two, one at each end on the two
// ranks' cores, where a read across is one on the receiver's.
constexpr double kRingCopies = 2;
// On a host with more ranks than cores, only an exchange's messages up to this size go through
// the rings: a larger one waits for its receiver's core while it fills the ring. 4 ranks on 2
// cores of an AMD EPYC (a read across 3.6 times a copy), 3 interleaved runs, out of place / in
// place, read across -> through the rings: all-gather of 1 MiB (256 KiB messages) -16%/-30%,
// all-to-all of 1 MiB -26%/-34%, of 4 MiB (256 KiB) +9%/-12%, all-gather of 4 MiB (1 MiB)
// +55%/+50%.
constexpr std::size_t kOversubscribedRingExchangeBytes = 256 * 1024;

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

void ring_if_sleeping(void* segment) {
  // The doorbell rings only for a reader that said it sleeps. It says so before its last look
  // at what it waits for, and the writer looks at its word after writing (with a fence before,
  // or the reader's remote barrier: segment.hpp): one of the two sees the other.
  if (header_of(segment)->sleeping.load(std::memory_order_relaxed) != 0) ring_doorbell(segment);
}

// Before a look at whether the peers sleep: a fence, or only the compiler's where their remote
// barriers stand in for it (segment.hpp). Without the fence, calls of 8-32 B on 2 ranks took
// less time: send/recv 2-9%, all-reduce 5-10%, broadcast 6-11% (Intel Xeon VM, medians of 11
// interleaved rounds).
void fence_unless(bool fence_free) {
  if (fence_free)
    std::atomic_signal_fence(std::memory_order_seq_cst);
  else
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

// Calls `piece(offset, size)` for each fragment of a message of `bytes` in order: one, empty, for
// an empty message.
template <class Piece>
void for_each_fragment(std::uint64_t bytes, Piece&& piece) {
  std::uint64_t at = 0;
  do {
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(kFragmentBytes, bytes - at));
    piece(at, n);
    at += n;
  } while (at < bytes);
}

}  // namespace

void ring_doorbell(void* segment) {
  SegmentHeader* h = header_of(segment);
  h->doorbell.fetch_add(1, std::memory_order_seq_cst);
  futex_wake(&h->doorbell);
}

ShmTransport::ShmTransport(const TransportSetup& setup)
    : rank_(setup.rank),
      size_(setup.size),
      peer_ranks_(setup.peers),
      segments_(setup, setup.options->shm_single_copy),
      peers_(static_cast<std::size_t>(setup.size)),
      matching_(setup.size, [this](int peer, std::exception_ptr e) { fail_peer(peer, e); }),
      single_copy_bytes_(setup.options->shm_single_copy_bytes),
      single_copy_pipelined_bytes_(setup.options->shm_single_copy_pipelined_bytes),
      single_copy_relayed_bytes_(std::min(single_copy_pipelined_bytes_, kRelayedSingleCopyBytes)),
      huge_pages_unasked_(transport::huge_pages_unasked()),
      polling_(setup.polling),
      timeout_(setup.options->timeout),
      oversubscribed_(setup.oversubscribed) {
  if (segments_.cma()) {
    const double cost = cross_memory_copy_cost();
    rings_beat_reads_across_ = cost > kRingCopies;
    log::debug("shm: a read across took " + std::to_string(cost) +
               " times a copy here: messages whose copy no sender shares " +
               (rings_beat_reads_across_ ? "go through the rings" : "are read across"));
  }
  barriers_before_sleep_ = !peer_ranks_.empty() &&
                           header_of(own())->barriers_before_sleep.load(std::memory_order_relaxed);
  boards_fence_free_ = barriers_before_sleep_;
  for (int p : peer_ranks_) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    peer.segment = segments_.peer(p).segment.get();
    peer.stores = RingStores(setup.options->shm_ring_stores);
    // Announced before the peer's segment was, which we have mapped.
    peer.fence_free =
        barriers_before_sleep_ &&
        header_of(peer.segment)->barriers_before_sleep.load(std::memory_order_relaxed);
    boards_fence_free_ = boards_fence_free_ && peer.fence_free;
  }
}

ShmTransport::~ShmTransport() {
  const Forwarded& f = forwarded_;
  if (f.written + f.queued + f.whole + f.read_in_place + f.read_across > 0)
    log::debug("shm: fragments forwarded as they landed: " + std::to_string(f.written) +
               " written into the ring, " + std::to_string(f.queued) +
               " queued behind a full ring; messages forwarded whole: " + std::to_string(f.whole) +
               "; messages read in place: " + std::to_string(f.read_in_place) +
               "; messages read across: " + std::to_string(f.read_across) +
               "; copied with their senders: " + std::to_string(f.shared) +
               " (chunks read here: " + std::to_string(f.chunks_read) +
               ", written by the senders: " + std::to_string(f.chunks_by_senders) + ")");
  for (int peer : peer_ranks_) {
    const RingStores& stores = peers_[static_cast<std::size_t>(peer)].stores;
    if (stores.streaming() || stores.cached_pace() > 0)
      log::debug("shm: fragments into the ring to rank " + std::to_string(peer) + ": " +
                 (stores.streaming() ? "streaming" : "cached") + " stores; cached copies at " +
                 std::to_string(stores.cached_pace()) + " GB/s (smoothed)");
  }
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

std::optional<shared_memory::Region> ShmTransport::in_place_region(const Request& send) const {
  // Where the peer's core is far, the lines of a buffer just written come back to its reads
  // one by one, where the rings' streaming stores pass through memory. 2 ranks of an AMD EPYC
  // VM through torch 1.13 (bench/torch_allreduce.py), in the runs that met the far placement:
  // shared tensors read in place took 421-473 us at 1 MiB and 2144-2441 at 4 MiB, heap tensors
  // through the rings 138-145 and 507-567; through the rings, shared tensors took 92-185 and
  // 458-623 (heap 82-173, 494-586).
  if (send.bytes < kSharedDescriptorBytes || send.streaming_stores || !segments_.cma() ||
      probing_ || peers_[static_cast<std::size_t>(send.peer)].stores.far())
    return std::nullopt;
  return shared_memory::find(send.buffer, send.bytes);
}

void ShmTransport::leave_call(std::chrono::milliseconds /*timeout*/) {
  if (!stores_timed_ && !sent_in_place_) return;  // small calls: nothing large moved
  for (int peer : peer_ranks_) peers_[static_cast<std::size_t>(peer)].stores.settle();
  // One call in RingStores::kProbeEvery of those that read in place goes through the rings,
  // timed, as RingStores probes its streamed writes: a job of shared buffers only would else
  // never see the peer's core go far.
  probing_ = sent_in_place_ && ++calls_in_place_ % RingStores::kProbeEvery == 0;
  stores_timed_ = sent_in_place_ = false;
}

std::size_t ShmTransport::single_copy_above(Request::Receivers receivers,
                                            bool streaming_stores) const {
  switch (receivers) {
    case Request::Receivers::exchanged:
      // Within the caches, where the kernel's copy across costs more than the rings' two (each
      // rank both sends and receives, so no sender waits to share the copy). 2 ranks of an AMD
      // EPYC VM (a read across 3.6 times a copy), 3-5 interleaved runs, out of place / in place,
      // read across -> through the rings: all-to-all 64 KiB -36%/-62%, 1 MiB -15%/-56%, 4 MiB
      // -33%/-36%; all-gather 512 KiB -28%/-29%, 8 MiB -16%/-30%; send/recv both ways 1 MiB
      // -27%/-29%. A sender that waits shares the copy where it goes across (scatter 4 MiB
      // through the rings: +96%/+106%), so other messages keep reading across. Also where the
      // peer's core is far (ring_stores.hpp): reading across there wins only buffers the sender
      // has not just written, and loses those it has (2 ranks of an AMD EPYC VM, 12 interleaved
      // runs, those that met the far placement, us, through the rings -> read across: out of place,
      // the send buffer untouched between calls, all-to-all 512 KiB 43 -> 35, send/recv 73 -> 45;
      // in place, sent from what this rank had just written, all-to-all 512 KiB 42 -> 204, 2 MiB
      // 141 -> 654, send/recv 2 MiB 285 -> 1104).
      if (rings_beat_reads_across_ && !streaming_stores)
        return oversubscribed_ ? std::max(single_copy_bytes_, kOversubscribedRingExchangeBytes)
                               : std::numeric_limits<std::size_t>::max();
      [[fallthrough]];
    case Request::Receivers::copy:
    case Request::Receivers::gathered:
      // Beyond the caches, through the rings at every size where buffers lie in 4 KiB pages:
      // the rings' streaming stores skip the reads for ownership that the kernel's copy of a
      // read across pays, and its pinning of each page costs more than the copy more (2 ranks
      // of an AMD EPYC, medians of 4-5 interleaved runs, out of place, us, read across ->
      // through the rings: 64 MiB gather 7264 -> 4248, all-gather 8009 -> 7132, all-to-all
      // 8305 -> 7233, scatter 6374 -> 4048; 4 ranks, gather 9275 -> 5526, all-gather 23111 ->
      // 17836). In huge pages reading across wins (all-to-all of 64 MiB, huge pages "always":
      // 5.7-6.3 ms read across, 8.2 through the rings; Open MPI 4.7-5.7).
      if (streaming_stores && !huge_pages_unasked_) return std::numeric_limits<std::size_t>::max();
      // Within them, where the kernel's copy across costs more than the rings' two, through
      // the rings below the sizes whose copy a waiting sender shares. 2 ranks of an AMD EPYC VM
      // (a read across 3.6-4.4 times a copy), 5 interleaved runs, out of place / in place, read
      // across -> through the rings: gather of 32 KiB a rank -54%/-55%, scatter -46%/-59%; of
      // 64 KiB, gather -34%/+3%, scatter -11%/-25%.
      return rings_beat_reads_across_
                 ? std::max(single_copy_bytes_, shared_copy_from(receivers) - 1)
                 : single_copy_bytes_;
    case Request::Receivers::pipelined:
      return single_copy_pipelined_bytes_;
    case Request::Receivers::kept_by_one:
      // Read across where both ranks share the copy (shared_copy.cpp), within the caches;
      // through the rings below that, and beyond the caches, as a reduction's messages. 2
      // ranks of an Intel Xeon, medians of 5 interleaved runs, in place / out of place, through
      // the rings -> read across: 128 KiB -26%/+38%, 512 KiB -46%/-6%, 1 MiB -46%/+2%; in
      // place the root's buffer is unchanged since its last call, out of place just copied.
      return streaming_stores ? single_copy_pipelined_bytes_
                              : std::min(single_copy_pipelined_bytes_, kSharedCopyBytes - 1);
    case Request::Receivers::relayed:
      if (streaming_stores) return single_copy_pipelined_bytes_;
      // Each rank of the chain copies the message before it passes it on, so none shares a
      // copy: through the rings where reading across is dear. 4 and 3 ranks on 2 cores of an
      // AMD EPYC VM, 5 interleaved runs, out of place / in place, read across -> through the
      // rings: 512 KiB -57%/-57% (4 ranks), -59%/-62% (3); 2 MiB -31%/-49%, -30%/-18%; 8 MiB
      // -16%/-20%, +9%/+23% (3 ranks, 16 chunks down a chain of 3 on 2 cores).
      return rings_beat_reads_across_ ? std::numeric_limits<std::size_t>::max()
                                      : single_copy_relayed_bytes_;
  }
  return single_copy_bytes_;
}

bool ShmTransport::forwards_pieces(const Request& receive) const {
  return receive.forward && !in_place_region(*receive.forward);
}

bool ShmTransport::goes_across(std::size_t bytes, Request::Receivers receivers,
                               bool streaming_stores) const {
  return bytes > single_copy_above(receivers, streaming_stores) && segments_.cma();
}

bool ShmTransport::forwards_whole_across(const ShmMessage& m, const Request& receive) const {
  return m.read_across && receive.forward && !receive.streaming_stores &&
         goes_across(*receive.forward);
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
  if (request->memory != nullptr) {
    DeviceMemoryShare share;
    request->memory->share(request->buffer, share);
    Outgoing out(descriptor(EntryKind::device_descriptor, p, request, sizeof share));
    out.owned.assign(reinterpret_cast<const char*>(&share), sizeof share);
    enqueue(request->peer, std::move(out));
    return;
  }
  if (const auto region = in_place_region(*request)) {
    sent_in_place_ = true;
    const SharedRegion wire{region->id, reinterpret_cast<std::uint64_t>(region->base),
                            region->bytes, region->fd, 0};
    Outgoing out(descriptor(EntryKind::shared_descriptor, p, request, sizeof wire));
    out.owned.assign(reinterpret_cast<const char*>(&wire), sizeof wire);
    enqueue(request->peer, std::move(out));
    return;
  }
  if (goes_across(*request)) {
    enqueue(request->peer, Outgoing(descriptor(EntryKind::descriptor, p, request, 0)));
    return;
  }
  const auto* data = static_cast<const char*>(request->buffer);
  if (write_whole(p, request->tag, request->signature, data, request->bytes)) {
    request->transferred = request->bytes;
    request->done = true;
    return;
  }
  for_each_fragment(request->bytes, [&](std::uint64_t at, std::uint32_t n) {
    p.outgoing.emplace_back(
        Entry{EntryKind::fragment, request->tag, request->bytes, at, 0, n, 0, request->signature},
        data + at, request, at + n == request->bytes);
  });
  push_outgoing(request->peer);
}

bool ShmTransport::send_now(int peer, std::uint32_t tag, std::uint64_t signature, const void* data,
                            std::size_t bytes, bool overwritten) {
  // What post() would send as a descriptor goes through it, but for a buffer that the call's
  // receive overwrites, where the whole message fits in the ring: its caller would copy it
  // first, and the peer read the copy across, lines just written on another core (send/recv in
  // place on 2 ranks, medians of 6 interleaved runs, through the ring: 32 KiB -44%, 128 KiB
  // -26%, 512 KiB -32%, 1 MiB -29%).
  if (failure_ || (!overwritten && goes_across(bytes, Request::Receivers::copy, false)))
    return false;
  return write_whole(peers_[static_cast<std::size_t>(peer)], tag, signature, data, bytes,
                     overwritten ? kRingBytes : kFragmentBytes);
}

bool ShmTransport::write_whole(Peer& p, std::uint32_t tag, std::uint64_t signature,
                               const void* data, std::size_t bytes, std::size_t most) {
  // Nothing queued before it: a message that fits goes straight into the ring.
  if (bytes > most || !p.outgoing.empty()) return false;
  Ring* ring = ring_of(p.segment, rank_);
  std::size_t records = 0;
  for_each_fragment(bytes, [&](std::uint64_t, std::uint32_t n) { records += record_bytes(n); });
  if (!has_room(p, ring, p.tail, records)) return false;
  const auto* from = static_cast<const char*>(data);
  std::uint64_t tail = p.tail;
  for_each_fragment(bytes, [&](std::uint64_t at, std::uint32_t n) {
    tail =
        timed_write(p, ring, tail, Entry{EntryKind::fragment, tag, bytes, at, 0, n, 0, signature},
                    from + at, false);
  });
  publish(p, tail);
  return true;
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
    tail = timed_write(p, ring, tail, out.entry, out.payload ? out.payload : out.owned.data(),
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

std::uint64_t ShmTransport::timed_write(Peer& p, Ring* ring, std::uint64_t tail,
                                        const Entry& entry, const void* payload,
                                        bool from_memory) {
  if (entry.kind != EntryKind::fragment || entry.payload < RingStores::kTimedBytes)
    return write_entry(ring, tail, entry, payload, from_memory);
  const kernels::Stores stores = p.stores.next();
  // No pace from the ring's first lap, which also faults its pages in. Copies from a source in
  // memory count, though its reads are in the time: a job of only large calls would otherwise
  // never see the peer's core far (2 ranks, 32 MiB all-reduces alone: 17 ms per call cached
  // where streamed took 5).
  const bool timed = tail >= kRingBytes;
  const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
  const std::uint64_t next = write_entry(ring, tail, entry, payload, from_memory,
                                         stores == kernels::Stores::streaming);
  if (timed) {
    p.stores.add(stores, entry.payload, Clock::now() - start);
    stores_timed_ = true;
  }
  return next;
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

void ShmTransport::publish(Peer& p, std::uint64_t tail) {
  p.tail = tail;
  fence_unless(p.fence_free);
  ring_if_sleeping(p.segment);
}

void ShmTransport::announce_board() {
  fence_unless(boards_fence_free_);
  for (int p : peer_ranks_) ring_if_sleeping(peers_[static_cast<std::size_t>(p)].segment);
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

bool ShmTransport::await_boards(const std::function<bool()>& ready, Clock::time_point until,
                                Waiting waiting) {
  // The rings are polled too: a peer's abort arrives there.
  return await([&] { return ready() || (poll_once(), failure_ != nullptr); }, until, waiting) &&
         ready();
}

template <class Done>
bool ShmTransport::await(Done done, Clock::time_point until, Waiting waiting) {
  if (done()) return true;
  // The clock is read once every few polls, as a read costs more than a poll; but after every
  // poll that yields the core, which may not come back for a while. The spin's end is set at
  // the first read: a small message's wait mostly ends before it.
  const unsigned polls_per_clock_read = polling_.yields ? 1 : 16;
  std::optional<Clock::time_point> spin_end;
  for (unsigned polls = 1;; ++polls) {
    if (polling_.yields) std::this_thread::yield();
    if (done()) return true;
    if (polls % polls_per_clock_read != 0) continue;
    const Clock::time_point now = Clock::now();
    if (!spin_end) spin_end = std::min(until, now + polling_.span(waiting));
    if (now >= *spin_end) break;
  }
  SegmentHeader* h = header_of(own());
  const std::uint32_t seen = h->doorbell.load(std::memory_order_seq_cst);
  h->sleeping.store(1, std::memory_order_seq_cst);
  // Pairs with the writers' fences before ring_if_sleeping(), or stands in for them. Should the
  // barrier fail after joining worked, a writer's entry missed here waits a slice at most.
  if (!barriers_before_sleep_ || !remote_barrier())
    std::atomic_thread_fence(std::memory_order_seq_cst);
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
  ring_doorbell(own());
}

bool ShmTransport::goodbye_behind_parked(int peer) const {
  if (!peers_[static_cast<std::size_t>(peer)].parked) return false;
  const Ring* ring = ring_of(own(), peer);
  // The writer clears the kind after its last record: the walk ends within one lap.
  const std::uint64_t head = ring->head.load(std::memory_order_acquire);
  for (std::uint64_t at = head; at - head < kRingBytes;) {
    const EntryKind kind = kind_at(ring, at);
    if (kind == EntryKind::none) return false;
    if (kind == EntryKind::goodbye) return true;
    at += record_bytes(entry_at(ring, at)->payload);
  }
  return false;
}

void ShmTransport::check_peers_alive() {
  for (int r : peer_ranks_) {
    PeerSegment& mapped = segments_.peer(r);
    if (!mapped.pidfd || failure_) continue;
    pollfd pfd{mapped.pidfd.get(), POLLIN, 0};
    if (::poll(&pfd, 1, 0) <= 0) continue;
    drain_ring(r);  // a goodbye written just before exiting counts
    if (peers_[static_cast<std::size_t>(r)].goodbye || goodbye_behind_parked(r)) {
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

bool ShmTransport::fail_with_last_word(int peer) {
  std::string reason = last_word(peer);
  if (reason.empty()) return false;
  fail_peer(peer, ErrorCode::peer_failure, "rank " + std::to_string(peer) + " aborted: " + reason);
  return true;
}

void ShmTransport::fail_dead_peer(int peer, const std::string& what) {
  // A peer that failed first and then exited said why in its abort entry: report that.
  if (fail_with_last_word(peer)) return;
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

void ShmTransport::abort(const std::string& reason, std::uint64_t failed_call) noexcept {
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
  // After the reasons: a peer that reads the number finds the reason in its ring.
  header_of(own())->failed_call.store(failed_call, std::memory_order_release);
}

PeerFailedCall ShmTransport::peer_failed_call() {
  PeerFailedCall earliest;
  for (int r : peer_ranks_) {
    const std::uint64_t call =
        header_of(segments_.peer(r).segment.get())->failed_call.load(std::memory_order_acquire);
    if (call != 0 && call < earliest.call) earliest = {call, r};
  }
  return earliest;
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

namespace {

// Preferred within a host. Its costs were measured with `arbench tune --np 2` on a 2-core
// x86-64 host.
const TransportRegistrar kShmRegistration{
    {.name = "shm",
     .summary = "shared-memory rings between ranks of one host, large messages read with "
                "process_vm_readv (one copy)",
     .reach = Reach::same_host,
     .preference = 100,
     .default_costs = {.latency_us = 1.2, .bandwidth_gbs = 7.0, .reduce_gbs = 5.6},
     .create = [](const TransportSetup& setup) { return std::make_unique<ShmTransport>(setup); },
     .available = nullptr,
     .steering_variables = {}}};

}  // namespace
}  // namespace arcoll::shm
