// TCP transport: an epoll progress engine over non-blocking sockets, several per peer (see
// handshake.hpp) with large messages striped across them, every frame validated on receipt.
// Losing peers and leaving: failing.cpp.
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <thread>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "src/base/store.hpp"
#include "transports/tcp/congestion.hpp"
#include "transports/tcp/tcp_transport.hpp"

namespace arcoll::tcp {

TcpTransport::TcpTransport(const TransportSetup& setup)
    : rank_(setup.rank),
      size_(setup.size),
      peer_ranks_(setup.peers),
      sockets_per_peer_(setup.options->sockets_per_peer),
      congestion_setting_(congestion_setting(*setup.options, setup.oversubscribed)),
      polling_(setup.polling),
      acceptor_(setup.job_token, {setup.job_id, setup.size, setup.options->sockets_per_peer}),
      peers_(static_cast<std::size_t>(setup.size)),
      matching_(setup.size, [this](int peer, std::exception_ptr e) { fail_peer(peer, e); }) {
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_)
    throw SystemError("tcp setup", std::string("epoll_create1: ") + std::strerror(errno), rank_);
  wake_event_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_event_)
    throw SystemError("tcp setup", std::string("eventfd: ") + std::strerror(errno), rank_);
  epoll_event woken{EPOLLIN, {.u64 = static_cast<std::uint64_t>(wake_event_.get())}};
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_event_.get(), &woken) != 0)
    throw SystemError("tcp setup", std::string("epoll_ctl: ") + std::strerror(errno), rank_);
  if (peer_ranks_.empty()) return;
  listener_ = net::listen_on(setup.listen_address, 0);
  net::set_nonblocking(listener_.get());
  // Accepted connections start with the listener's; a named one the kernel lacks is refused
  // here, before any peer connects.
  apply_congestion_control(listener_.get(), congestion_setting_);
  epoll_event ev{EPOLLIN, {.u64 = static_cast<std::uint64_t>(listener_.get())}};
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  const net::Endpoint self = net::local_endpoint(listener_.get());
  setup.store->set("tcp/" + std::to_string(rank_), self.str());
  log::debug("tcp transport listening on " + self.str());

  try {
    for (Dialed& d : connect_to_lower_ranks(setup, sockets_per_peer_))
      add_socket(std::move(d.fd), d.peer, d.index);
    wait_for_higher_ranks(setup.deadline);
  } catch (const Error& e) {
    // Peers already connected learn why this rank gives up, instead of seeing it vanish.
    abort(e.what(), 1);
    throw;
  }
}

void TcpTransport::wait_for_higher_ranks(Clock::time_point deadline) {
  auto missing = [&] {
    std::vector<int> ranks;
    for (int p : peer_ranks_)
      if (p > rank_ && peers_[static_cast<std::size_t>(p)].sockets.size() <
                           static_cast<std::size_t>(sockets_per_peer_))
        ranks.push_back(p);
    return ranks;
  };
  while (!missing().empty()) {
    if (Clock::now() >= deadline) {
      std::string list;
      for (int p : missing()) list += (list.empty() ? "" : ", ") + std::to_string(p);
      throw TimeoutError("tcp setup", "rank(s) " + list + " did not connect before the timeout",
                         rank_, missing().front());
    }
    progress(deadline, Waiting::poll_first);
    if (failure_) std::rethrow_exception(failure_);
  }
}

TcpTransport::~TcpTransport() {
  send_goodbyes();
}

void TcpTransport::add_socket(net::Fd fd, int peer, int index) {
  net::set_nonblocking(fd.get());
  net::set_nodelay(fd.get());
  const std::string congestion = apply_congestion_control(fd.get(), congestion_setting_);
  if (index == 0)
    log::debug("tcp transport: rank " + std::to_string(peer) + " under " + congestion +
               " congestion control");
  // Buffer sizes are left to the kernel, which grows them with the traffic: in an A/B over
  // loopback (2 ranks, 64 KiB to 4 MiB), fixed ones of 256 KiB to 4 MiB were no faster.
  Socket& s = sockets_.emplace_back();
  s.fd = std::move(fd);
  s.peer = peer;
  s.index = index;
  auto& list = peers_[static_cast<std::size_t>(peer)].sockets;
  list.push_back(&s);
  std::sort(list.begin(), list.end(), [](Socket* a, Socket* b) { return a->index < b->index; });
  epoll_event ev{EPOLLIN, {.ptr = &s}};
  s.epoll_events = EPOLLIN;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, s.fd.get(), &ev);
}

void TcpTransport::update_events(Socket& s) {
  if (s.closed) return;
  std::uint32_t events = (s.parked ? 0u : static_cast<std::uint32_t>(EPOLLIN)) |
                         (s.queue.empty() ? 0u : static_cast<std::uint32_t>(EPOLLOUT));
  if (events == s.epoll_events) return;
  s.epoll_events = events;
  epoll_event ev{events, {.ptr = &s}};
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, s.fd.get(), &ev);
}

void TcpTransport::admit(Acceptor::Greeted greeted) {
  const int peer = greeted.hello.rank;
  const int index = greeted.hello.socket_index;
  const auto& existing = peers_[static_cast<std::size_t>(peer)].sockets;
  std::string why;
  if (peer <= rank_ || !serves(peer))
    why = "rank " + std::to_string(peer) + " should not connect to us";
  else if (std::any_of(existing.begin(), existing.end(),
                       [&](Socket* s) { return s->index == index; }))
    why = "duplicate connection for rank " + std::to_string(peer);
  if (!why.empty()) {
    log::warn("tcp transport: rejected connection from " + greeted.address + ": " + why);
    return;
  }
  add_socket(std::move(greeted.fd), peer, index);
}

void TcpTransport::post(const RequestPtr& request) {
  if (!serves(request->peer))
    throw InvalidArgument("tcp", "no connection to rank " + std::to_string(request->peer), rank_);
  if (failure_) {
    request->error = failure_;
    request->done = true;
    return;
  }
  if (request->kind == Request::Kind::send)
    post_send(request);
  else
    post_recv(request);
}

void TcpTransport::post_send(const RequestPtr& request) {
  Peer& p = peers_[static_cast<std::size_t>(request->peer)];
  if (p.departed()) {
    fail_peer(request->peer, ErrorCode::peer_failure,
              "rank " + std::to_string(request->peer) +
                  " has destroyed its communicator; it cannot receive " + request->describe());
    request->error = failure_;
    request->done = true;
    return;
  }
  const std::uint64_t sequence = p.next_send_sequence++;
  const auto* data = static_cast<const char*>(request->buffer);
  std::uint64_t offset = 0;
  std::size_t frame = 0;
  do {
    auto length =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(kStripeBytes, request->bytes - offset));
    Socket& s = *p.sockets[frame % p.sockets.size()];
    OutFrame& out = s.queue.emplace_back();
    out.header = make_data_header(request->tag, request->signature, sequence, request->bytes,
                                  offset, length);
    out.payload = data + offset;
    out.request = request;
    offset += length;
    ++frame;
  } while (offset < request->bytes);
  if (request->held) return;  // written with the next send to the peer, or by progress()
  for (Socket* s : p.sockets) flush(*s);
}

void TcpTransport::post_recv(const RequestPtr& request) {
  // A held message (complete, or the rest lands on its own), or one of another call.
  if (matching_.post(request) || request->done) return;
  Peer& p = peers_[static_cast<std::size_t>(request->peer)];
  if (p.departed()) {
    fail_peer(request->peer, ErrorCode::peer_failure,
              "rank " + std::to_string(request->peer) +
                  " destroyed its communicator before sending " + request->describe());
    return;
  }
  unpark(p);
}

void TcpTransport::unpark(Peer& p) {
  for (Socket* s : p.sockets) {
    if (!s->parked) continue;
    s->parked = false;
    if (!start_frame(*s)) continue;  // still nowhere to put it
    update_events(*s);
  }
}

bool TcpTransport::flush(Socket& s) {
  constexpr std::size_t header_bytes = sizeof(FrameHeader);
  bool wrote = false;
  while (!s.queue.empty() && !s.closed) {
    // Small queued frames in one write (kFramesPerWrite, kBatchedWriteBytes): a call's small
    // messages to a peer (a root check's and the call's own) cost the sender one system call,
    // the receiver one wake-up. Large ones go a frame a write, as a write's cost is little
    // beside theirs.
    iovec iov[2 * kFramesPerWrite];
    std::size_t count = 0, offered = 0;
    for (std::size_t i = 0;
         i < s.queue.size() && i < kFramesPerWrite && (i == 0 || offered < kBatchedWriteBytes);
         ++i) {
      OutFrame& out = s.queue[i];
      if (out.written < header_bytes)
        iov[count++] = {reinterpret_cast<char*>(&out.header) + out.written,
                        header_bytes - out.written};
      const char* payload = out.request ? out.payload : out.control_payload.data();
      const std::size_t payload_done = out.written > header_bytes ? out.written - header_bytes : 0;
      if (out.header.length > payload_done)
        iov[count++] = {const_cast<char*>(payload) + payload_done,
                        out.header.length - payload_done};
      offered += out.total() - out.written;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t n = ::sendmsg(s.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
      connection_lost(s, "connection to rank " + std::to_string(s.peer) +
                             " failed while sending (" + std::strerror(errno) + "); rank " +
                             std::to_string(s.peer) + " exited or crashed");
      return true;
    }
    wrote = true;
    for (auto left = static_cast<std::size_t>(n); left > 0;) {
      OutFrame& out = s.queue.front();
      const std::size_t taken = std::min(left, out.total() - out.written);
      const std::size_t before = out.written;
      out.written += taken;
      left -= taken;
      if (out.request) {
        const std::size_t payload_before = before > header_bytes ? before - header_bytes : 0;
        const std::size_t payload_after =
            out.written > header_bytes ? out.written - header_bytes : 0;
        out.request->transferred += payload_after - payload_before;
      }
      if (out.written < out.total()) break;
      if (out.request && out.request->transferred == out.request->bytes) out.request->done = true;
      s.queue.pop_front();
    }
    if (static_cast<std::size_t>(n) < offered) break;  // the socket is full
  }
  update_events(s);
  return wrote;
}

void TcpTransport::handle_socket(Socket& s, std::uint32_t events) {
  if (s.closed) return;
  if (events & EPOLLOUT) flush(s);
  if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
    std::size_t budget = kReadBudget;
    while (budget > 0 && read_some(s, budget)) {
    }
  }
}

bool TcpTransport::read_some(Socket& s, std::size_t& budget) {
  if (s.parked || s.closed) return false;
  char* into;
  std::size_t want;
  bool landing = false;  // into the landing piece, then land()ed element by element
  if (!s.have_header) {
    into = reinterpret_cast<char*>(&s.header) + s.header_got;
    want = sizeof(FrameHeader) - s.header_got;
  } else if (s.target) {
    want = s.header.length - s.payload_got - s.partial_bytes;
    into = matching_.direct(*s.target, s.header.offset + s.payload_got);
    if (into == nullptr) {
      landing = true;
      landing_piece_.resize(kLandingPieceBytes);
      std::memcpy(landing_piece_.data(), s.partial, s.partial_bytes);
      into = landing_piece_.data() + s.partial_bytes;
      want = std::min(want, landing_piece_.size() - s.partial_bytes);
    }
  } else {
    into = s.control_payload.data() + s.payload_got;
    want = s.header.length - s.payload_got;
  }
  ssize_t n = want == 0 ? 0 : receive(s, into, std::min(want, budget));
  if (want != 0 && n <= 0) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    if (n == 0 && s.goodbye) {
      s.closed = true;
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, s.fd.get(), nullptr);
      return false;
    }
    std::string why = n == 0 ? "closed the connection"
                             : std::string("connection failed (") + std::strerror(errno) + ")";
    connection_lost(s, "rank " + std::to_string(s.peer) + " " + why +
                           " without saying goodbye: it exited, crashed or was killed");
    return false;
  }
  budget -= std::min<std::size_t>(budget, static_cast<std::size_t>(n));
  if (!s.have_header) {
    s.header_got += static_cast<std::size_t>(n);
    if (s.header_got < sizeof(FrameHeader)) return true;
    if (std::string why = validate(s.header); !why.empty()) {
      fail_peer(s.peer, ErrorCode::protocol,
                "malformed data from rank " + std::to_string(s.peer) + ": " + why);
      return false;
    }
    s.have_header = true;
    s.payload_got = 0;
    return start_frame(s);
  }
  auto got = static_cast<std::uint32_t>(n);
  if (landing) {
    // Whole elements land now; the start of a cut one waits for the rest of its bytes.
    const std::uint32_t have = s.partial_bytes + got;
    const std::uint32_t whole =
        have - have % static_cast<std::uint32_t>(transport::landing_element(*s.target->request));
    matching_.deliver(*s.target, s.header.offset + s.payload_got, landing_piece_.data(), whole);
    s.partial_bytes = have - whole;
    std::memcpy(s.partial, landing_piece_.data() + whole, s.partial_bytes);
    got = whole;
  } else if (s.target) {
    matching_.delivered(*s.target, got);
  }
  s.payload_got += got;
  if (s.payload_got == s.header.length) finish_frame(s);
  return !s.closed && failure_ == nullptr;
}

ssize_t TcpTransport::receive(Socket& s, char* into, std::size_t want) {
  if (s.ahead_begin == s.ahead_end) {
    // A large read lands in place and leaves `drained` alone: while a large message streams
    // in, the next read mostly finds more of it, where waiting for epoll would cost a call.
    if (want >= kReadInPlaceBytes) return ::recv(s.fd.get(), into, want, 0);
    if (s.drained) {
      errno = EAGAIN;
      return -1;
    }
    if (!s.ahead) s.ahead = std::make_unique<char[]>(kReadAheadBytes);
    const ssize_t n = ::recv(s.fd.get(), s.ahead.get(), kReadAheadBytes, 0);
    if (n <= 0) return n;
    s.drained = static_cast<std::size_t>(n) < kReadAheadBytes;
    s.ahead_begin = 0;
    s.ahead_end = static_cast<std::size_t>(n);
  }
  const std::size_t n = std::min(want, s.ahead_end - s.ahead_begin);
  std::memcpy(into, s.ahead.get() + s.ahead_begin, n);
  s.ahead_begin += n;
  return static_cast<ssize_t>(n);
}

// Decides where the payload of the frame whose header was just read goes. Returns false
// (and parks the socket) when it has nowhere to go yet.
bool TcpTransport::start_frame(Socket& s) {
  Peer& p = peers_[static_cast<std::size_t>(s.peer)];
  const FrameHeader& h = s.header;
  auto kind = static_cast<FrameKind>(h.kind);
  if (kind != FrameKind::data || s.discarding) {
    s.target.reset();
    s.control_payload.assign(h.length, '\0');
    s.dropping_frame = kind == FrameKind::data;
    if (h.length == 0) finish_frame(s);
    return !s.closed;
  }
  if (h.offset == 0 && s.index == 0) {
    if (h.sequence != p.next_recv_sequence) {
      fail_peer(s.peer, ErrorCode::protocol,
                "message " + std::to_string(h.sequence) + " from rank " + std::to_string(s.peer) +
                    " out of order (expected " + std::to_string(p.next_recv_sequence) + ")");
      return false;
    }
    reveal(s);
    if (s.parked) return false;
  } else {
    if (h.sequence >= p.next_recv_sequence) {  // its first frame has not arrived on socket 0
      s.parked = true;
      update_events(s);
      return false;
    }
    auto it = p.incoming.find(h.sequence);
    if (it == p.incoming.end() || it->second->bytes != h.message_bytes ||
        it->second->tag != h.tag) {
      fail_peer(s.peer, ErrorCode::protocol,
                "frame of unknown or finished message " + std::to_string(h.sequence) +
                    " from rank " + std::to_string(s.peer));
      return false;
    }
    s.target = it->second;
  }
  if (h.length == 0) finish_frame(s);
  return !s.closed && failure_ == nullptr;
}

// The first frame of message `sequence` arrived on socket 0: match it with a receive,
// hold it, or park the socket until a receive is posted.
void TcpTransport::reveal(Socket& s) {
  Peer& p = peers_[static_cast<std::size_t>(s.peer)];
  const FrameHeader& h = s.header;
  auto m = std::make_shared<Message>();
  m->tag = h.tag;
  m->signature = h.signature;
  m->bytes = h.message_bytes;
  switch (matching_.arrive(s.peer, m)) {
    case Arrival::failed:
      return;
    case Arrival::park:
      s.parked = true;
      update_events(s);
      return;
    case Arrival::matched:
    case Arrival::held:
      break;
  }
  p.incoming[h.sequence] = m;
  ++p.next_recv_sequence;
  s.target = m;
  // Continuation frames of this message may be waiting on the other sockets.
  for (Socket* other : p.sockets)
    if (other != &s && other->parked) {
      other->parked = false;
      if (start_frame(*other)) update_events(*other);
    }
}

void TcpTransport::finish_frame(Socket& s) {
  const FrameHeader h = s.header;
  s.have_header = false;
  s.header_got = 0;
  s.payload_got = 0;
  if (std::exchange(s.dropping_frame, false)) return;
  auto kind = static_cast<FrameKind>(h.kind);
  if (kind == FrameKind::goodbye) {
    s.goodbye = true;
    Peer& p = peers_[static_cast<std::size_t>(s.peer)];
    if (const Request* waiting = matching_.first_posted(s.peer); p.departed() && waiting)
      fail_peer(s.peer, ErrorCode::peer_failure,
                "rank " + std::to_string(s.peer) + " destroyed its communicator before sending " +
                    waiting->describe());
    return;
  }
  if (kind == FrameKind::abort) {
    if (h.offset != 0 && h.offset < peer_failed_call_.call) peer_failed_call_ = {h.offset, s.peer};
    fail_peer(s.peer, ErrorCode::peer_failure,
              "rank " + std::to_string(s.peer) + " aborted: " + s.control_payload);
    return;
  }
  std::shared_ptr<Message> m = std::move(s.target);
  // A complete message left `incoming`: its receive is done, or it is held until one is posted.
  if (m->received == m->bytes) peers_[static_cast<std::size_t>(s.peer)].incoming.erase(h.sequence);
}

void TcpTransport::progress(Clock::time_point until, Waiting waiting) {
  // Bytes written here may complete the request the caller waits for: then only look at the
  // sockets, don't sleep on them.
  bool wrote = false;
  for (Socket& s : sockets_) {
    if (!s.queue.empty()) wrote |= flush(s);
    // Bytes read ahead wake no epoll: read them now (a socket unparked, or out of budget).
    if (s.ahead_begin < s.ahead_end && !s.parked && !s.closed) {
      handle_socket(s, EPOLLIN);
      wrote = true;
    }
  }
  epoll_event events[64];
  int n = 0;
  if (wrote) {
    n = ::epoll_wait(epoll_.get(), events, 64, 0);
  } else {
    // Poll a little before sleeping: a wake-up from epoll costs more than a short spin.
    const auto spin_end = std::min(until, Clock::now() + polling_.span(waiting));
    while (n == 0 && Clock::now() < spin_end) {
      if (polling_.yields) std::this_thread::yield();
      n = ::epoll_wait(epoll_.get(), events, 64, 0);
    }
    if (n == 0) n = ::epoll_wait(epoll_.get(), events, 64, net::poll_timeout_ms(until));
  }
  for (int i = 0; i < n; ++i) {
    const epoll_event& ev = events[i];
    if (ev.data.u64 == static_cast<std::uint64_t>(wake_event_.get())) {
      std::uint64_t count;
      [[maybe_unused]] const auto read = ::read(wake_event_.get(), &count, sizeof count);
    } else if (ev.data.u64 == static_cast<std::uint64_t>(listener_.get())) {
      acceptor_.accept_all(listener_.get(), epoll_.get());
    } else if (ev.data.u64 & Acceptor::kEpollTag) {
      const int fd = static_cast<int>(ev.data.u64 & ~Acceptor::kEpollTag);
      if (auto greeted = acceptor_.read(fd, epoll_.get())) admit(std::move(*greeted));
    } else {
      auto& s = *static_cast<Socket*>(ev.data.ptr);
      s.drained = false;  // readable again
      handle_socket(s, ev.events);
    }
  }
  if (!acceptor_.idle()) acceptor_.drop_stale(epoll_.get());
}

void TcpTransport::wake() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto written = ::write(wake_event_.get(), &one, sizeof one);
}

namespace {

// Reaches any host. Its costs were measured over the loopback between two emulated hosts: a
// real network is slower, so tune on it.
const TransportRegistrar kTcpRegistration{
    {.name = "tcp",
     .summary = "TCP sockets with an epoll progress engine, striping over several sockets per peer",
     .reach = Reach::any_host,
     .preference = 10,
     .default_costs = {.latency_us = 8.7, .bandwidth_gbs = 1.8, .reduce_gbs = 5.6},
     .create = [](const TransportSetup& setup) { return std::make_unique<TcpTransport>(setup); },
     .available = nullptr,
     .steering_variables = {}}};

}  // namespace
}  // namespace arcoll::tcp
