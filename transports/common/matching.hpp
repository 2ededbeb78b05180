// Receive matching, written once for every transport that needs it (by composition): per
// peer, the receives posted and not yet met, the messages that arrived before their receive
// (held), and the matched ones still arriving. Receives of one peer and tag meet its messages
// of that tag in order; a message of another call or size fails the peer naming both sides
// (Request's CallMismatch, worded by the core).
//
// Eager or park: a message that arrives before its receive is held (copied aside) when it is
// small; a large one must wait where it is (in the sender's ring, in the socket with the
// sender held back by TCP) until its receive is posted, unless its bytes stay readable at the
// sender anyway (a descriptor of the sender's buffer), which is held at any size. A large one
// is held too when a receive of another tag from the same peer is posted: parked, it would
// stand in front of that receive's message in the stream, and an algorithm that waits for its
// channels in another order than they were sent (multi_ring) would wait forever.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "src/base/request.hpp"
#include "transports/common/landing.hpp"

namespace arcoll::transport {

// Messages up to this size are held when they come before their receive.
inline constexpr std::uint64_t kEagerBytes = 64 * 1024;

// A message from its first bytes on.
struct Incoming {
  std::uint32_t tag = 0;
  std::uint64_t signature = 0;
  std::uint64_t bytes = 0;
  std::uint64_t received = 0;  // landed or held so far
  RequestPtr request;          // the receive it lands in, once matched
  // Its bytes go to `held` until it is complete: it arrived before its receive. A receive
  // that takes it meanwhile gets them when the last one has come (held messages are small),
  // so that a reducing receive never sees a piece cut inside an element.
  bool holding = false;
  std::vector<char> held;
};

// Message is Incoming, or derived from it with what one transport keeps of a message.
template <class Message = Incoming>
class Matching {
 public:
  using MessagePtr = std::shared_ptr<Message>;
  // `fail_peer(peer, error)` is the transport's own failure path, called when a receive meets a
  // message of another call: it fails the peer (and, through fail(), what waits on it here).
  Matching(int world_size, std::function<void(int, std::exception_ptr)> fail_peer)
      : peers_(static_cast<std::size_t>(world_size)), fail_peer_(std::move(fail_peer)) {}

  enum class Arrival { matched, held, park, failed };

  // The header of a message from `peer` arrived: it meets the first receive posted for its
  // tag, or is held, or must wait where it is (park: reveal it again once a receive is posted),
  // or met a receive of another call (failed). `in_place`: the transport keeps its bytes
  // readable (at the sender, or in a buffer of its own) until a receive takes them, so it is
  // held at any size without copying here.
  Arrival arrive(int peer, const MessagePtr& message, bool in_place = false) {
    PeerState& p = peer_state(peer);
    const auto match = std::find_if(p.posted.begin(), p.posted.end(),
                                     [&](const RequestPtr& r) { return r->tag == message->tag; });
    if (match != p.posted.end()) {
      RequestPtr receive = *match;
      erase(p.posted, match);
      if (!take(receive, message)) return Arrival::failed;
      if (message->bytes == 0) complete(*message);
      return Arrival::matched;
    }
    if (!in_place && message->bytes > kEagerBytes && p.posted.empty()) return Arrival::park;
    if (!in_place) {
      message->holding = true;
      message->held.resize(message->bytes);
    }
    p.held.push_back(message);
    return Arrival::held;
  }

  // A whole message arrived at once and a receive is posted for its tag: it lands there as
  // `land_into(receive)` puts it (true), with no record of the message kept. False, touching
  // nothing, when no receive waits for it: arrive() takes it then.
  template <class LandInto>
  bool arrive_whole(int peer, std::uint32_t tag, std::uint64_t signature, std::uint64_t bytes,
                    LandInto&& land_into) {
    PeerState& p = peer_state(peer);
    const auto match = std::find_if(p.posted.begin(), p.posted.end(),
                                     [&](const RequestPtr& r) { return r->tag == tag; });
    if (match == p.posted.end()) return false;
    RequestPtr receive = std::move(*match);
    erase(p.posted, match);
    if (!belongs(receive, bytes, signature)) return true;
    land_into(*receive);
    receive->transferred = bytes;
    receive->done = true;
    return true;
  }

  // A receive is posted: it takes the first held message of its tag and returns it (complete
  // when all of it had come); or it waits in the queue (nullptr). When it met a message of
  // another call, the receive and the peer fail (nullptr, receive done).
  MessagePtr post(const RequestPtr& receive) {
    PeerState& p = peer_state(receive->peer);
    const auto match = std::find_if(p.held.begin(), p.held.end(),
                                    [&](const MessagePtr& m) { return m->tag == receive->tag; });
    if (match == p.held.end()) {
      p.posted.push_back(receive);
      return nullptr;
    }
    MessagePtr message = *match;
    erase(p.held, match);
    if (!take(receive, message)) return nullptr;
    if (message->received == message->bytes) complete(*message);
    return message;
  }

  // Where bytes of `message` at `offset` may be read straight to, or nullptr when they must
  // go through deliver() (its receive reduces or widens them, or is device memory).
  char* direct(Message& message, std::uint64_t offset) {
    if (message.holding) return message.held.data() + offset;
    if (!lands_straight_in(*message.request)) return nullptr;
    return static_cast<char*>(message.request->buffer) + offset;
  }
  // `n` bytes of `message` at `offset` arrived at `src`: they land in its receive, or are held;
  // the last of them completes the receive.
  void deliver(Message& message, std::uint64_t offset, const void* src, std::size_t n) {
    if (!message.holding)
      land(*message.request, offset, src, n);
    else if (n != 0)
      std::memcpy(message.held.data() + offset, src, n);
    delivered(message, n);
  }
  // `n` bytes were read straight where direct() said.
  void delivered(Message& message, std::size_t n) {
    message.received += n;
    if (message.request && message.received == message.bytes) complete(message);
  }

  // Every receive waiting on `peer`, posted or landing, fails with `error`.
  void fail(int peer, const std::exception_ptr& error) {
    PeerState& p = peer_state(peer);
    for (const RequestPtr& r : p.posted) fail_receive(r, error);
    for (const MessagePtr& m : p.arriving) fail_receive(m->request, error);
    p.posted.clear();
    p.arriving.clear();
  }

  // The first receive posted for `peer` and not met yet, or null.
  const Request* first_posted(int peer) const {
    const PeerState& p = peers_[static_cast<std::size_t>(peer)];
    return p.posted.empty() ? nullptr : p.posted.front().get();
  }
  bool idle(int peer) const {
    const PeerState& p = peers_[static_cast<std::size_t>(peer)];
    return p.posted.empty() && p.held.empty() && p.arriving.empty();
  }
  // "2 receives posted, 1 held, 0 arriving", for a stuck job's diagnosis.
  std::string pending_state(int peer) const {
    const PeerState& p = peers_[static_cast<std::size_t>(peer)];
    return std::to_string(p.posted.size()) + " receives posted, " +
           std::to_string(p.held.size()) + " held, " + std::to_string(p.arriving.size()) +
           " arriving";
  }

 private:
  struct PeerState {
    std::deque<RequestPtr> posted;
    std::deque<MessagePtr> held;
    std::vector<MessagePtr> arriving;  // matched, not complete
  };
  PeerState& peer_state(int peer) { return peers_[static_cast<std::size_t>(peer)]; }
  // Matches are nearly always the first in their queue, which a deque pops cheaply.
  template <class Queue>
  static void erase(Queue& queue, typename Queue::iterator at) {
    if (at == queue.begin())
      queue.pop_front();
    else
      queue.erase(at);
  }

  static void fail_receive(const RequestPtr& receive, const std::exception_ptr& error) {
    if (!receive || receive->done) return;
    receive->error = error;
    receive->done = true;
  }
  // Matches `receive` with `message`; false when they belong to different calls.
  bool take(const RequestPtr& receive, const MessagePtr& message) {
    if (!belongs(receive, message->bytes, message->signature)) return false;
    message->request = receive;
    peer_state(receive->peer).arriving.push_back(message);
    return true;
  }
  // Whether a message of `bytes` and `signature` belongs to `receive`; when not, the receive
  // and the peer fail, naming both sides.
  bool belongs(const RequestPtr& receive, std::uint64_t bytes, std::uint64_t signature) {
    auto mismatch = check_match(*receive, bytes, signature);
    if (!mismatch) return true;
    fail_receive(receive, mismatch);
    fail_peer_(receive->peer, mismatch);
    return false;
  }
  void complete(Message& message) {
    Request& receive = *message.request;
    if (receive.done) return;  // an empty message, completed when it met its receive
    if (message.holding) {
      land(receive, 0, message.held.data(), message.bytes);
      message.holding = false;
      std::vector<char>().swap(message.held);
    }
    receive.transferred = message.bytes;
    receive.done = true;
    auto& arriving = peer_state(receive.peer).arriving;
    std::erase_if(arriving, [&](const MessagePtr& m) { return m.get() == &message; });
  }

  std::vector<PeerState> peers_;
  std::function<void(int, std::exception_ptr)> fail_peer_;
};

}  // namespace arcoll::transport
