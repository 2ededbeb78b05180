// The shm transport's receiving side (shm_transport.hpp): the entries a peer wrote into its
// ring, drained and delivered to their receives as they arrive, or a small message taken at
// once by its receive (receive_now); pieces of a forwarding receive reduced and written on into
// the ring back; messages read from the sender's memory (a descriptor).
#include <poll.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>

#include "src/base/reduce.hpp"
#include "transports/shm/shm_transport.hpp"

namespace arcoll::shm {
namespace {

// Looks a receive taken at once (receive_now) takes for its message with a core per rank, a
// load each (0.3-0.5 us in all on an AMD EPYC): about a peer's call around a small message.
// With more ranks than cores, a few, the core given away before each, as the polls of a wait
// do (the peer that sends it may be waiting for it): send/recv round a ring of 4 ranks on 2
// cores of an AMD EPYC, medians of 9 interleaved runs, one look -> 8: 8 B 2.92 -> 2.56 us,
// 128 B 2.84 -> 1.91, 2 KiB 3.38 -> 3.07.
constexpr int kReceiveNowLooks = 1024;
constexpr int kReceiveNowYieldingLooks = 8;

}  // namespace

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
  if (moved) free_read(p, ring, head);
  return moved;
}

void ShmTransport::free_read(Peer& p, Ring* ring, std::uint64_t head) {
  ring->head.store(head, std::memory_order_seq_cst);
  // Looked at before it is cleared: the exchange would take the writer's cache line.
  if (ring->writer_waiting.load(std::memory_order_seq_cst) != 0 &&
      ring->writer_waiting.exchange(0, std::memory_order_seq_cst) != 0)
    ring_doorbell(p.segment);
}

// Takes the peer's next entry where it is a whole message of this receive's tag, call and size,
// and nothing from the peer is posted, held or arriving before it; anything else goes through
// post(), whose matching holds it or says what differs.
bool ShmTransport::receive_now(int peer, std::uint32_t tag, std::uint64_t signature, void* data,
                               std::size_t bytes) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (failure_ || p.parked || !matching_.idle(peer)) return false;
  Ring* ring = ring_of(own(), peer);
  const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
  EntryKind kind = kind_at(ring, head);
  const int looks = polling_.yields ? kReceiveNowYieldingLooks : kReceiveNowLooks;
  for (int look = 0; kind == EntryKind::none && look < looks; ++look) {
    if (polling_.yields) std::this_thread::yield();
    kind = kind_at(ring, head);
  }
  if (kind != EntryKind::fragment) return false;
  const Entry* e = entry_at(ring, head);
  if (e->tag != tag || e->signature != signature || e->message_bytes != bytes ||
      e->payload != bytes)
    return false;
  ring_copy_out(ring, head + sizeof(Entry), data, bytes);
  free_read(p, ring, head + record_bytes(bytes));
  return true;
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
    case EntryKind::copy_offer:
      help_receiver(peer, e.offset);
      return;
    case EntryKind::descriptor:
    case EntryKind::shared_descriptor:
    case EntryKind::device_descriptor:
    case EntryKind::fragment:
      break;
    default:
      fail_peer(peer, ErrorCode::protocol, "unknown entry in the shared ring");
      return;
  }
  const bool described = e.kind == EntryKind::descriptor ||
                         e.kind == EntryKind::shared_descriptor ||
                         e.kind == EntryKind::device_descriptor;
  const bool first = described || e.offset == 0;
  // A message of one fragment is far below what is read in place (kSharedDescriptorBytes), and
  // so is its forward, which has its size: forwarded piece by piece.
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
    if (e.kind == EntryKind::device_descriptor) {
      DeviceMemoryShare share;
      if (e.payload != sizeof share) {
        fail_peer(peer, ErrorCode::protocol, "malformed device-memory descriptor");
        return;
      }
      ring_copy_out(ring, payload_at, &share, sizeof share);
      if (share.offset > share.bytes || e.message_bytes > share.bytes - share.offset ||
          share.bytes > UINT64_MAX - share.base) {
        fail_peer(peer, ErrorCode::protocol, "device-memory descriptor outside its allocation");
        return;
      }
      m->device = share;
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
  const auto of_tag = first ? std::prev(p.arriving.end())
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
  if (receive && !m.holding && !forwards_whole_across(m, *receive) && forwards_pieces(*receive)) {
    land_and_forward(*receive, offset, src, n);
    matching_.delivered(m, n);
    return;
  }
  matching_.deliver(m, offset, src, n);
  if (receive != nullptr) forward_whole_once_landed(*receive);
}

void ShmTransport::forward_whole_once_landed(Request& receive) {
  if (!receive.forward || !receive.done || receive.error) return;
  ++forwarded_.whole;
  post(receive.forward);
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
      // Into a ring written with streaming stores (the peer's core far: ring_stores.hpp), the
      // piece is reduced in cache first; else straight into the ring, and copied from there.
      const bool streamed = piece >= RingStores::kTimedBytes &&
                            q.stores.next() == kernels::Stores::streaming;
      if (streamed) forward_piece_.resize(kFragmentBytes);
      auto reduce_and_copy = [&](char* dst, std::size_t o, std::size_t length) {
        // A streaming call's `with` comes from memory: page by page (copy_from_memory).
        const std::size_t step = receive.streaming_stores ? kPageBytes : length;
        for (std::size_t sub = 0; sub < length; sub += step) {
          const std::size_t n = std::min(step, length - sub);
          const char* w = with + at + o + sub;
          if (receive.streaming_stores) prefetch_next_page(w);
          char* reduced = streamed ? forward_piece_.data() : dst + sub;
          kernels::reduce(reduced, w, src + done + o + sub, n / element, l.type, l.op);
          if (streamed) kernels::copy(dst + sub, reduced, n, kernels::Stores::streaming);
          kernels::copy(landed + at + o + sub, reduced, n, stores);
        }
      };
      publish(q, write_entry_with(ring, q.tail, entry, reduce_and_copy));
      ++forwarded_.written;
      send->transferred += piece;
      if (last) send->done = true;
    } else {
      transport::land(receive, at, src + done, piece);
      q.outgoing.emplace_back(entry, landed + at, send, last);
      ++forwarded_.queued;
    }
    done += piece;
  }
}

// Reads a descriptor message from the sender's memory: straight into the receive buffer, or,
// for a reducing receive, piece by piece through a buffer small enough to stay in cache.
void ShmTransport::complete_remote(int peer, const std::shared_ptr<ShmMessage>& m) {
  if (m->device) {
    if (read_device(peer, *m)) enqueue(peer, Outgoing(control_entry(EntryKind::ack, m->send_id)));
    return;
  }
  if (m->region) {
    // Where the region cannot be mapped, the message is read across processes below.
    if (const char* base = peer_regions_.map(peer, segments_.peer(peer).pidfd.get(), *m->region)) {
      ++forwarded_.read_in_place;
      deliver_piece(*m, 0, base + (m->address - m->region->base), m->bytes);
      enqueue(peer, Outgoing(control_entry(EntryKind::ack, m->send_id)));
      return;
    }
  }
  ++forwarded_.read_across;
  m->read_across = true;
  char* straight = matching_.direct(*m, 0);
  if (straight != nullptr && shares_copy(peer, *m)) {
    if (!read_with_sender(peer, *m, straight)) return;
    matching_.delivered(*m, m->bytes);
    enqueue(peer, Outgoing(control_entry(EntryKind::ack, m->send_id)));
    return;
  }
  const std::uint64_t piece = straight != nullptr ? m->bytes : kReducePieceBytes;
  if (straight == nullptr) bounce_.resize(kReducePieceBytes);
  for (std::uint64_t at = 0; at < m->bytes; at += piece) {
    const std::uint64_t n = std::min(piece, m->bytes - at);
    char* into = straight != nullptr ? straight + at : bounce_.data();
    if (!read_across(peer, into, m->address + at, n)) return;
    if (straight != nullptr)
      matching_.delivered(*m, n);
    else
      deliver_piece(*m, at, into, n);
  }
  enqueue(peer, Outgoing(control_entry(EntryKind::ack, m->send_id)));
}

bool ShmTransport::read_device(int peer, ShmMessage& m) {
  const DeviceMemoryInfo* kind = transport::OpenedDeviceMemory::kind_of(*m.device);
  if (kind == nullptr) {
    fail_peer(peer, ErrorCode::protocol,
              "rank " + std::to_string(peer) +
                  " sent a buffer of device memory this process "
                  "cannot open (" +
                  std::string(m.device->kind.data(), m.device->kind.size()) + ")");
    return false;
  }
  const PeerSegment& segment = segments_.peer(peer);
  const char* from = nullptr;
  try {
    const SegmentOwner& owner = header_of(segment.segment.get())->owner;
    from = peer_devices_.open(*kind, {owner.pid, owner.start, owner.pid_namespace},
                              segment.pidfd.get(), *m.device, m.request->buffer);
  } catch (const Error& e) {
    const std::string why = "its device buffer could not be opened (" + e.message() + ")";
    pollfd exited{segment.pidfd.get(), POLLIN, 0};
    // As for a read across: a peer that gave up may have freed the buffer.
    if (segment.pidfd && ::poll(&exited, 1, 0) > 0)
      fail_dead_peer(peer, why);
    else if (!fail_with_last_word(peer))
      fail_peer(peer, ErrorCode::system, "rank " + std::to_string(peer) + ": " + why);
    return false;
  }
  // Into device memory it lands from the peer's device, reduced there where its receive
  // reduces; a plain copy into host memory goes straight into the buffer; a reducing receive
  // in host memory takes it through the host, piece by piece.
  if (m.request->memory != nullptr) {
    matching_.deliver(m, 0, from, m.bytes);
    return true;
  }
  if (char* straight = matching_.direct(m, 0)) {
    kind->copy(straight, from, m.bytes);
    matching_.delivered(m, m.bytes);
    return true;
  }
  bounce_.resize(kReducePieceBytes);
  for (std::uint64_t at = 0; at < m.bytes; at += kReducePieceBytes) {
    const std::uint64_t n = std::min<std::uint64_t>(kReducePieceBytes, m.bytes - at);
    kind->copy(bounce_.data(), from + at, n);
    deliver_piece(m, at, bounce_.data(), n);
  }
  return true;
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

}  // namespace arcoll::shm
