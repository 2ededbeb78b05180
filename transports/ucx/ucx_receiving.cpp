// The UCX transport's receiving: active messages put in order by their sequence numbers, met
// with their receives through the shared Matching, eager ones landed (in pieces) from UCX's
// buffer or kept, rendezvous ones fetched once matched (ucx_transport.cpp has setup, sending
// and waiting; ucx_leaving.cpp, failing and leaving).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "transports/common/landing.hpp"
#include "transports/ucx/ucx_transport.hpp"

namespace arcoll::ucx {
namespace {

// A message of `bytes` that meets its receive by the header's tag and signature.
std::shared_ptr<UcxMessage> message_of(const Header& header, std::uint64_t bytes) {
  auto message = std::make_shared<UcxMessage>();
  message->tag = header.tag;
  message->signature = header.signature;
  message->bytes = bytes;
  return message;
}

void on_fetched(void* request, ucs_status_t status, std::size_t /*length*/, void* message) {
  std::unique_ptr<std::pair<UcxTransport*, UcxMessage*>> fetching(
      static_cast<std::pair<UcxTransport*, UcxMessage*>*>(message));
  fetching->first->fetch_done(fetching->second, status);
  ucp_request_free(request);
}

// The flush that follows a fetch (see UcxTransport::fetch_done) is done.
void on_acknowledged(void* request, ucs_status_t status, void* message) {
  std::unique_ptr<std::pair<UcxTransport*, UcxMessage*>> fetching(
      static_cast<std::pair<UcxTransport*, UcxMessage*>*>(message));
  fetching->second->acknowledged = true;
  fetching->first->fetch_done(fetching->second, status);
  ucp_request_free(request);
}

}  // namespace

// ---- receiving ------------------------------------------------------------------------------

void UcxTransport::post_recv(const RequestPtr& request) {
  Peer& p = peers_[static_cast<std::size_t>(request->peer)];
  std::shared_ptr<UcxMessage> message = matching_.post(request);
  if (!message) {
    if (p.goodbye && !request->done)
      fail_peer(request->peer, ErrorCode::peer_failure,
                "rank " + std::to_string(request->peer) +
                    " destroyed its communicator before sending " + request->describe());
    return;
  }
  if (message->descriptor != nullptr) {
    to_fetch_.push_back(message);
    return;
  }
  if (message->announced) return clear(request->peer, message);
  land_kept(*message);
}

void UcxTransport::clear(int peer, const std::shared_ptr<UcxMessage>& message) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  p.cleared.push_back(message);
  auto record = std::make_unique<Sending>();
  record->header = {p.next_send++, 0, 0, 0, rank_, message->send_id, 0};
  record->peer = peer;
  send(std::move(record), kClear, nullptr, 0, UCP_AM_SEND_FLAG_EAGER);
}

void UcxTransport::land_kept(UcxMessage& message) {
  for (const KeptBytes& piece : message.kept)
    matching_.deliver(message, message.received,
                      aligned_for(*message.request, piece.data(), piece.size()), piece.size());
  message.give_back();
}

void UcxTransport::keep(const std::shared_ptr<UcxMessage>& message, void* data, std::size_t length,
                        Arrived how, bool& kept) {
  message->kept_bytes += length;
  if (how == Arrived::keepable && held_from_worker_.eager_bytes + length <= kHeldEagerBytes) {
    message->kept.push_back({data, length, {}});
    kept = true;
    if (message->held_from == nullptr) remember_held(message);
    held_from_worker_.eager_bytes += length;
    return;
  }
  // Copied after the last copy, if the last piece kept was one: no allocation per piece.
  if (message->kept.empty() || message->kept.back().descriptor != nullptr) {
    message->kept.emplace_back();
    message->kept.back().copy.reserve(message->bytes - (message->kept_bytes - length));
  }
  std::vector<char>& copy = message->kept.back().copy;
  copy.insert(copy.end(), static_cast<const char*>(data), static_cast<const char*>(data) + length);
}

void UcxTransport::remember_held(const std::shared_ptr<UcxMessage>& message) {
  message->held_from = &held_from_worker_;
  // Those landed or dropped since are forgotten as the list would grow.
  if (held_.size() == held_.capacity())
    std::erase_if(held_, [](const std::weak_ptr<UcxMessage>& weak) { return weak.expired(); });
  held_.push_back(message);
}

ucs_status_t UcxTransport::arrived(AmId id, const Header& header, void* data, std::size_t length,
                                   Arrived how) {
  const bool rendezvous = how == Arrived::rendezvous;
  const int from = header.from;
  if (!std::binary_search(peer_ranks_.begin(), peer_ranks_.end(), from)) {
    log::warn("ucx: dropped an active message from rank " + std::to_string(from) +
              ", not a peer of rank " + std::to_string(rank_));
    return UCS_OK;
  }
  Peer& p = peers_[static_cast<std::size_t>(from)];
  if (p.failed) return UCS_OK;
  if (header.sequence != p.next_receive) {
    if (header.sequence < p.next_receive || p.early.count(header.sequence) != 0) {
      fail_peer(from, ErrorCode::protocol,
                "rank " + std::to_string(from) + " sent message " +
                    std::to_string(header.sequence) + " twice");
      return UCS_OK;
    }
    Early early{id, header, {}, rendezvous ? data : nullptr, length};
    if (!rendezvous)
      early.bytes.assign(static_cast<char*>(data), static_cast<char*>(data) + length);
    p.early.emplace(header.sequence, std::move(early));
    return rendezvous ? UCS_INPROGRESS : UCS_OK;
  }
  bool kept = false;
  handle(from, id, header, data, length, how, kept);
  ++p.next_receive;
  // What came ahead of its turn and is due now.
  for (auto it = p.early.find(p.next_receive); it != p.early.end() && !p.failed;
       it = p.early.find(p.next_receive)) {
    Early early = std::move(it->second);
    p.early.erase(it);
    bool kept_early = false;
    const bool described = early.descriptor != nullptr;
    handle(from, early.id, early.header, described ? early.descriptor : early.bytes.data(),
           early.length, described ? Arrived::rendezvous : Arrived::passing, kept_early);
    if (described && !kept_early) release(early.descriptor);
    ++p.next_receive;
  }
  return kept ? UCS_INPROGRESS : UCS_OK;
}

void UcxTransport::handle(int peer, AmId id, const Header& header, void* data, std::size_t length,
                          Arrived how, bool& kept) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  const bool rendezvous = how == Arrived::rendezvous;
  if (id == kHello) {
    p.hello = true;
    return;
  }
  if (id == kFarewell) {
    p.farewell = true;
    return;
  }
  if (id == kGoodbye) {
    p.goodbye = true;
    if (!p.lost && p.ep != nullptr) send_word(peer, kFarewell);
    if (const Request* waiting = matching_.first_posted(peer))
      fail_peer(peer, ErrorCode::peer_failure,
                "rank " + std::to_string(peer) + " destroyed its communicator before sending " +
                    waiting->describe());
    return;
  }
  if (id == kAbort) {
    const std::string text = rendezvous ? std::string("(its reason did not come)")
                                        : std::string(static_cast<const char*>(data),
                                                      std::min<std::size_t>(length, 4096));
    if (header.failed_call != 0 && header.failed_call < peer_failed_call_.call)
      peer_failed_call_ = {header.failed_call, peer};
    fail_peer(peer, ErrorCode::peer_failure, "rank " + std::to_string(peer) + " aborted: " + text);
    return;
  }
  if (id == kClear) {
    auto cleared = announced_.cleared(header.offset);
    // A send to another rank that it names is failed below with the others, from to_stream_.
    if (cleared) to_stream_.push_back(std::move(cleared->send));
    if (!cleared || to_stream_.back()->peer != peer)
      return fail_peer(peer, ErrorCode::protocol,
                       "rank " + std::to_string(peer) + " cleared a send (number " +
                           std::to_string(header.offset) +
                           ") that this rank did not announce to it");
    return;
  }
  if (id == kCleared || (id == kData && !rendezvous && header.message_bytes != length))
    return take_piece(peer, id, header, data, length, how, kept);
  if (p.assembling) return broke_off(peer);
  if (id == kAnnounce) {
    auto message = message_of(header, header.message_bytes);
    message->announced = true;
    message->send_id = header.offset;
    // Held until its receive is posted (post_recv clears it then), or failed on a mismatch.
    if (matching_.arrive(peer, message, /*in_place=*/true) ==
        transport::Matching<UcxMessage>::Arrival::matched)
      clear(peer, message);
    return;
  }
  if (!rendezvous) {
    // Straight into a receive waiting for it; else kept until one is posted.
    if (matching_.arrive_whole(peer, header.tag, header.signature, length, [&](Request& receive) {
          transport::land(receive, 0, aligned_for(receive, data, length), length);
        }))
      return;
    auto message = message_of(header, length);
    if (matching_.arrive(peer, message, /*in_place=*/true) ==
        transport::Matching<UcxMessage>::Arrival::held)
      keep(message, data, length, how, kept);
    return;
  }
  auto message = message_of(header, length);
  message->descriptor = data;
  switch (matching_.arrive(peer, message, /*in_place=*/true)) {
    case transport::Matching<UcxMessage>::Arrival::matched:
      kept = true;
      to_fetch_.push_back(message);
      break;
    case transport::Matching<UcxMessage>::Arrival::held:
      kept = true;
      remember_held(message);
      break;
    default:  // a mismatch failed the peer; UCX drops the descriptor
      break;
  }
}

// Pieces come in order (the sequence numbers see to it), each right after the one before, with
// nothing else of their sender's between them.
void UcxTransport::take_piece(int peer, AmId id, const Header& header, void* data,
                              std::size_t length, Arrived how, bool& kept) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (header.offset == 0 && p.assembling) return broke_off(peer);
  if (header.offset == 0 && id == kCleared) {
    // Its receive was matched when it was announced.
    if (p.cleared.empty())
      return fail_peer(peer, ErrorCode::protocol,
                       "rank " + std::to_string(peer) +
                           " sent the pieces of a message that this rank had not cleared");
    p.assembling = std::move(p.cleared.front());
    p.cleared.pop_front();
  } else if (header.offset == 0) {
    auto message = message_of(header, header.message_bytes);
    if (matching_.arrive(peer, message, /*in_place=*/true) ==
        transport::Matching<UcxMessage>::Arrival::failed)
      return;
    p.assembling = std::move(message);
  }
  const std::shared_ptr<UcxMessage>& message = p.assembling;
  if (message == nullptr || header.tag != message->tag || header.message_bytes != message->bytes ||
      header.offset != message->received + message->kept_bytes ||
      header.offset + length > message->bytes)
    return fail_peer(peer, ErrorCode::protocol,
                     "rank " + std::to_string(peer) + " sent a piece of " + std::to_string(length) +
                         " B at " + std::to_string(header.offset) +
                         " of a message it had not begun");
  // Until its receive takes what was kept, later pieces are kept behind it.
  if (!message->request || !message->kept.empty()) {
    keep(message, data, length, how, kept);
  } else if (message->request->done) {
    message->received += length;  // its receive failed: dropped, but counted
  } else {
    matching_.deliver(*message, header.offset, aligned_for(*message->request, data, length),
                      length);
  }
  if (header.offset + length == message->bytes) p.assembling.reset();
}

void UcxTransport::broke_off(int peer) {
  const UcxMessage& message = *peers_[static_cast<std::size_t>(peer)].assembling;
  fail_peer(peer, ErrorCode::protocol,
            "rank " + std::to_string(peer) + " broke off a message of " +
                std::to_string(message.bytes) + " B after " +
                std::to_string(message.received + message.kept_bytes) + " B");
}

const void* UcxTransport::aligned_for(const Request& receive, const void* data,
                                      std::size_t length) {
  // UCX's buffer follows its headers and ours: reductions read whole elements.
  if (transport::lands_as_copy(receive) || reinterpret_cast<std::uintptr_t>(data) % 8 == 0)
    return data;
  const auto* bytes = static_cast<const char*>(data);
  aligned_.assign(bytes, bytes + length);
  return aligned_.data();
}

// Rendezvous messages whose receive is posted are fetched only after the worker has delivered
// what came with them: an abort that followed a message must stop it being fetched (the
// sender's buffer went back to its caller), and it is read in the same progress when it had
// come.
void UcxTransport::start_fetches() {
  std::vector<std::shared_ptr<UcxMessage>> due;
  due.swap(to_fetch_);
  for (const auto& message : due) {
    if (!message->request || message->request->done || failure_) {
      release(std::exchange(message->descriptor, nullptr));
      continue;
    }
    fetch(message);
  }
}

// A rendezvous message whose receive is posted: UCX moves its bytes, into the receive's buffer
// when they land there as a copy (in host memory, or device memory UCX takes).
void UcxTransport::fetch(const std::shared_ptr<UcxMessage>& message) {
  Request& receive = *message->request;
  void* into = receive.buffer;
  const bool device = receive.memory != nullptr && takes(*receive.memory);
  if (!transport::lands_straight_in(receive) && !(device && transport::lands_as_copy(receive))) {
    message->staging.reset(new char[message->bytes]);
    into = message->staging.get();
  }
  fetching_[message.get()] = message;
  auto* callback = new std::pair<UcxTransport*, UcxMessage*>(this, message.get());
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &on_fetched;
  param.user_data = callback;
  if (device && into == receive.buffer) {
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  const ucs_status_ptr_t status = ucp_am_recv_data_nbx(
      worker_, std::exchange(message->descriptor, nullptr), into, message->bytes, &param);
  if (status != nullptr && !UCS_PTR_IS_ERR(status)) {
    message->handle = status;  // its callback frees it, and `callback`
    return;
  }
  delete callback;
  fetch_done(message.get(), status == nullptr ? UCS_OK : UCS_PTR_STATUS(status));
}

// A fetched message counts as received once its sender has been told (UCX's acknowledgement of
// the rendezvous went out): a rank that left the call at once and then moved its worker no more
// (its next call on another communicator, say) would leave the sender waiting on a
// communicator it cannot leave, and the sender would wait for it there.
void UcxTransport::fetch_done(UcxMessage* fetched, ucs_status_t status) {
  auto it = fetching_.find(fetched);
  if (it == fetching_.end()) return;
  std::shared_ptr<UcxMessage> message = it->second;
  if (!message->request || message->request->done) {
    fetching_.erase(it);
    return;
  }
  if (status != UCS_OK) {  // judged as a lost connection (see send_done)
    fetching_.erase(it);
    connection_lost(message->request->peer, status);
    pending_failures_.push_back(message->request);
    return;
  }
  // UCX acknowledges the fetch to the sender, whose send completes on that. TCP's endpoints
  // may hold the acknowledgement (see sent()): flushed here. Through shared memory it waits
  // only while the fifo to the sender is full, and leave_call() flushes it once per call: here
  // the flush is a round trip that waits for this rank's own sends to the sender too, whose
  // sender may wait for this receive in turn (a tree passes chunks up and down a link at
  // once): 3 ms a call on 3 ranks over shared memory.
  if (!message->acknowledged &&
      peers_[static_cast<std::size_t>(message->request->peer)].queues_sends) {
    message->acknowledged = true;
    auto* callback = new std::pair<UcxTransport*, UcxMessage*>(this, message.get());
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &on_acknowledged;
    param.user_data = callback;
    const ucs_status_ptr_t flushing =
        ucp_ep_flush_nbx(peers_[static_cast<std::size_t>(message->request->peer)].ep, &param);
    if (UCS_PTR_IS_PTR(flushing)) {
      message->handle = flushing;
      return;  // on_acknowledged() comes back here
    }
    delete callback;
    if (UCS_PTR_IS_ERR(flushing)) return fetch_done(fetched, UCS_PTR_STATUS(flushing));
  }
  fetching_.erase(it);
  // (A flush above acknowledged it; else leave_call() sees that it went.)
  if (!message->acknowledged)
    peers_[static_cast<std::size_t>(message->request->peer)].fetched = true;
  if (!message->staging) {
    matching_.delivered(*message, message->bytes);
    return;
  }
  matching_.deliver(*message, 0, message->staging.get(), message->bytes);
  message->staging.reset();
}

}  // namespace arcoll::ucx
