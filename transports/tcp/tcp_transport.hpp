// The TCP transport's connections and engine, as its files share them: tcp_transport.cpp
// (connecting, posting, reading and writing frames, progress) and failing.cpp (losing a peer,
// aborting, leaving, and describing what is pending).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transports/common/matching.hpp"
#include "transports/tcp/frame.hpp"
#include "transports/tcp/handshake.hpp"
#include "transports/transport.hpp"

namespace arcoll::tcp {

using net::Clock;

// Large messages are cut into frames of this size, dealt round-robin over the sockets. Each
// frame costs a header, an event and a turn to another socket on both sides: with 128 KiB
// frames, 1 MiB all-reduces of 2 ranks over loopback took 23 % longer at best.
constexpr std::uint32_t kStripeBytes = 512 * 1024;
// A socket's queued frames go out in one write, this many at most, while those before come
// to less than kBatchedWriteBytes (TcpTransport::flush).
constexpr std::size_t kFramesPerWrite = 16;
constexpr std::size_t kBatchedWriteBytes = 64 * 1024;
// Receives that land as more than a copy (a reduction, a wider type) read the socket in pieces
// of this size, which the reduction finds in cache.
constexpr std::size_t kLandingPieceBytes = 128 * 1024;
// Bytes read from one socket per event before the engine turns to the others.
constexpr std::size_t kReadBudget = 4 << 20;
// Reads smaller than kReadInPlaceBytes take up to kReadAheadBytes from the socket at once
// (TcpTransport::receive): a frame's header mostly brings a payload of up to 16 KiB with it.
// With 4 KiB, all-reduces of 8 KiB on 2 ranks over loopback took 2.6 recv calls a rank a call,
// now 1.7 (strace -c), and 21.3 -> 16.9 us (medians of 5 interleaved runs; send/recv 20.3 ->
// 16.0, 128 KiB and 512 KiB alike). Reads of 4 KiB and more land in place: taking those
// through the 16 KiB too made 128-512 KiB messages up to 1.4 times slower.
constexpr std::size_t kReadInPlaceBytes = 4096;
constexpr std::size_t kReadAheadBytes = 16 * 1024;
// How long an abort may spend finishing a frame half written before its reason can follow.
constexpr auto kAbortFlushTime = std::chrono::milliseconds(200);

using Message = transport::Incoming;
using Arrival = transport::Matching<>::Arrival;

struct OutFrame {
  FrameHeader header;
  const char* payload = nullptr;
  std::string control_payload;  // owned payload of control frames
  RequestPtr request;           // null for control frames
  std::size_t written = 0;      // header + payload bytes written so far
  std::size_t total() const { return sizeof(FrameHeader) + header.length; }
};

struct Socket {
  net::Fd fd;
  int peer = -1;
  int index = 0;
  // Receive side.
  FrameHeader header{};
  std::size_t header_got = 0;
  bool have_header = false;         // header complete, payload pending
  std::shared_ptr<Message> target;  // the message the current frame's payload belongs to
  std::uint32_t payload_got = 0;
  // The start of an element whose other bytes have not come yet, when the payload goes
  // through the landing piece (its bytes are then not counted in payload_got).
  char partial[8];
  std::uint32_t partial_bytes = 0;
  std::string control_payload;
  // Bytes read ahead of where they go (TcpTransport::receive): [ahead_begin, ahead_end).
  std::unique_ptr<char[]> ahead;
  std::size_t ahead_begin = 0, ahead_end = 0;
  // The socket's last read ahead (TcpTransport::receive) took less than it asked for: it held
  // nothing more then. Until epoll reports it readable again, another small read would only
  // say EAGAIN (a system call per message).
  bool drained = false;
  bool parked = false;  // waiting for a receive to be posted / a message revealed
  bool goodbye = false;
  bool closed = false;
  bool broken = false;  // the connection failed; its peer is being failed
  // Failed with a frame half written (closed, the connection still sound): nothing may follow.
  bool cut = false;
  // After a failure: data frames are read and dropped, to reach what the peer said last.
  bool discarding = false;
  bool dropping_frame = false;
  // Send side.
  std::deque<OutFrame> queue;
  std::uint32_t epoll_events = 0;
};

struct Peer {
  std::vector<Socket*> sockets;
  std::uint64_t next_send_sequence = 0;
  std::uint64_t next_recv_sequence = 0;
  std::map<std::uint64_t, std::shared_ptr<Message>> incoming;  // still arriving, by sequence
  bool departed() const {
    return !sockets.empty() &&
           std::all_of(sockets.begin(), sockets.end(), [](Socket* s) { return s->goodbye; });
  }
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TransportSetup& setup);
  ~TcpTransport() override;

  std::string_view name() const override { return "tcp"; }
  void post(const RequestPtr& request) override;
  void progress(Clock::time_point until, Waiting waiting) override;
  void wake() noexcept override;
  std::exception_ptr failure() const override { return failure_; }
  void abort(const std::string& reason, std::uint64_t failed_call) noexcept override;
  PeerFailedCall peer_failed_call() override { return peer_failed_call_; }
  std::string pending_state() const override;

 private:
  void wait_for_higher_ranks(Clock::time_point deadline);
  void add_socket(net::Fd fd, int peer, int index);
  void update_events(Socket& s);
  // A connection the acceptor admitted: a socket of the peer it names, when that peer may
  // connect to us and has not yet on that socket.
  void admit(Acceptor::Greeted greeted);
  void handle_socket(Socket& s, std::uint32_t events);
  // Reads what is available; false once the socket is parked, closed or failed.
  bool read_some(Socket& s, std::size_t& budget);
  // Up to `want` bytes for `into`: those read ahead first, else from the socket, where a small
  // read (a frame's header, a small payload) takes up to kReadAheadBytes at once, so that a
  // small frame's header and payload cost one call; large ones land in place. recv's result.
  ssize_t receive(Socket& s, char* into, std::size_t want);
  bool start_frame(Socket& s);
  void finish_frame(Socket& s);
  void reveal(Socket& s);
  void unpark(Peer& p);
  void post_recv(const RequestPtr& request);
  void post_send(const RequestPtr& request);
  // Writes what the socket takes now; true when any byte went out.
  bool flush(Socket& s);
  void fail_peer(int peer, const std::exception_ptr& error);
  void connection_lost(Socket& s, const std::string& why);
  void fail_peer(int peer, ErrorCode code, const std::string& message);
  void send_goodbyes() noexcept;

  int rank_;
  int size_;
  std::vector<int> peer_ranks_;  // served by this transport, ascending
  bool serves(int peer) const {
    return std::binary_search(peer_ranks_.begin(), peer_ranks_.end(), peer);
  }
  int sockets_per_peer_;
  std::string congestion_setting_;  // Options::tcp_congestion
  Polling polling_;
  net::Fd listener_;
  Acceptor acceptor_;
  net::Fd epoll_;
  net::Fd wake_event_;  // an eventfd in epoll_, written by wake()
  std::vector<Peer> peers_;
  transport::Matching<> matching_;
  std::vector<char> landing_piece_;  // see kLandingPieceBytes
  std::list<Socket> sockets_;        // stable addresses
  std::exception_ptr failure_;
  PeerFailedCall peer_failed_call_;  // the earliest an abort frame named
  bool aborted_ = false;
};

}  // namespace arcoll::tcp
