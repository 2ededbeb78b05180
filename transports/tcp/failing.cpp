// How a TCP rank fails and leaves: a lost connection, a failed peer, an abort that tells
// every peer why, the goodbyes of a clean exit, and what is pending when a call is stuck.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "arcoll/error.hpp"
#include "transports/tcp/tcp_transport.hpp"

namespace arcoll::tcp {

// A peer that aborted may have said why on one of its sockets just before it closed them:
// reading that first lets the error name the rank that failed first, not its messenger.
void TcpTransport::connection_lost(Socket& s, const std::string& why) {
  if (s.broken) return;
  s.broken = true;
  const bool explained_before = failure_ != nullptr;
  for (Socket* other : peers_[static_cast<std::size_t>(s.peer)].sockets) {
    // Data nobody posted a receive for may stand before the peer's abort reason.
    other->discarding = true;
    if (other->parked && other->have_header && !other->target) {  // parked on a frame's header
      other->control_payload.assign(other->header.length, '\0');
      other->dropping_frame = true;
    }
    other->parked = false;
    other->drained = false;  // what the peer said last may have come since the last read
    std::size_t budget = kReadBudget;
    while (budget > 0 && read_some(*other, budget)) {
    }
  }
  if (failure_ != nullptr && !explained_before) return;
  fail_peer(s.peer, ErrorCode::peer_failure, why);
}

void TcpTransport::fail_peer(int peer, ErrorCode code, const std::string& message) {
  std::exception_ptr error = make_error(code, "tcp", message, rank_, peer);
  fail_peer(peer, error);
}

void TcpTransport::fail_peer(int peer, const std::exception_ptr& error) {
  if (!failure_) failure_ = error;
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  for (Socket* s : p.sockets) {
    if (s->closed) continue;
    s->closed = true;
    s->cut = !s->queue.empty() && s->queue.front().written > 0;
    epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s->fd.get(), nullptr);
    for (auto& out : s->queue)
      if (out.request && !out.request->done) {
        out.request->error = error;
        out.request->done = true;
      }
    s->queue.clear();
  }
  matching_.fail(peer, error);
  p.incoming.clear();
}

void TcpTransport::abort(const std::string& reason, std::uint64_t failed_call) noexcept {
  if (aborted_) return;
  aborted_ = true;
  std::string text = reason.substr(0, kMaxAbortText);
  // Every socket carries the reason: whichever one the peer reads (or finds closed) first, the
  // reason is next on it, even when the peer reads the others no further.
  std::vector<Socket*> telling;
  for (Socket& s : sockets_) {
    // A peer failed here for what it sent (a call mismatch) is told too: its connection is
    // sound, and it would otherwise see only this rank vanish.
    if (s.broken || s.cut || s.goodbye || s.fd.get() < 0) continue;
    s.closed = false;
    // A frame half written cannot be cut: it is finished, what follows it is dropped.
    const bool mid_frame = !s.queue.empty() && s.queue.front().written > 0;
    s.queue.erase(s.queue.begin() + (mid_frame ? 1 : 0), s.queue.end());
    OutFrame& out = s.queue.emplace_back();
    out.header = make_control_header(FrameKind::abort, static_cast<std::uint32_t>(text.size()),
                                     failed_call);
    out.control_payload = text;
    telling.push_back(&s);
  }
  // Best effort, briefly: a peer that stopped reading does not hold this rank up.
  const auto deadline = Clock::now() + kAbortFlushTime;
  while (true) {
    std::vector<pollfd> waiting;
    for (Socket* s : telling) {
      try {
        flush(*s);
      } catch (...) {
        s->queue.clear();
      }
      if (!s->queue.empty() && !s->closed) waiting.push_back({s->fd.get(), POLLOUT, 0});
    }
    if (waiting.empty() || Clock::now() >= deadline) break;
    ::poll(waiting.data(), waiting.size(), net::poll_timeout_ms(deadline));
  }
  // The reason must not be lost to a reset: end the sending side, then wait for the peers to
  // close (they will, once they have read it) or the time to be up.
  std::vector<int> open;
  for (Socket& s : sockets_)
    if (!s.closed && s.fd.get() >= 0) {
      if (s.queue.empty()) ::shutdown(s.fd.get(), SHUT_WR);
      open.push_back(s.fd.get());
    }
  net::drain_until_closed(open, Clock::now() + kAbortFlushTime);
}

std::string TcpTransport::pending_state() const {
  std::string text;
  for (std::size_t r = 0; r < peers_.size(); ++r) {
    const Peer& p = peers_[r];
    std::string line;
    for (const Socket* s : p.sockets)
      if (s->parked || !s->queue.empty() || s->have_header)
        line += " socket " + std::to_string(s->index) + (s->parked ? " parked" : "") +
                (s->have_header ? " in frame of message " + std::to_string(s->header.sequence) +
                                      " (tag " + hex_tag(s->header.tag) + ")"
                                : "") +
                ", " + std::to_string(s->queue.size()) + " frames to send;";
    if (matching_.idle(static_cast<int>(r)) && p.incoming.empty() && line.empty()) continue;
    text += "rank " + std::to_string(r) + ": " + matching_.pending_state(static_cast<int>(r)) +
            ", messages received " + std::to_string(p.next_recv_sequence) + ", sent " +
            std::to_string(p.next_send_sequence) + ";" + line + "\n";
  }
  return text;
}

void TcpTransport::send_goodbyes() noexcept {
  if (aborted_) return;
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  for (Socket& s : sockets_) {
    if (s.closed) continue;
    OutFrame& out = s.queue.emplace_back();
    out.header = make_control_header(FrameKind::goodbye, 0);
  }
  // Flush what is queued (normally just the goodbyes) without waiting on a stuck peer.
  try {
    while (Clock::now() < deadline &&
           std::any_of(sockets_.begin(), sockets_.end(),
                       [](const Socket& s) { return !s.closed && !s.queue.empty(); }))
      progress(std::min(deadline, Clock::now() + std::chrono::milliseconds(50)),
               Waiting::poll_first);
  } catch (...) {
  }
}

}  // namespace arcoll::tcp
