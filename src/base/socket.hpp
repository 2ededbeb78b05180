// Thin helpers over POSIX TCP sockets (IPv4), shared by the rendezvous store and the TCP
// transport. Blocking-style helpers wait with poll() and never past their deadline.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>
#include <utility>

namespace arcoll::net {

using Clock = std::chrono::steady_clock;

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct Endpoint {
  std::string host;  // dotted IPv4 address or a resolvable name
  int port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "10.0.0.1:29500" → Endpoint; nullopt-like failure via bool.
bool parse_endpoint(const std::string& text, Endpoint& out);
sockaddr_in resolve(const Endpoint& endpoint, const char* operation);
std::string to_string(const sockaddr_in& address);
// `host` resolved to a dotted IPv4 address.
std::string numeric_address(const std::string& host);

// The local IPv4 address the kernel would use to reach `host` (no packet is sent).
std::string address_reaching(const std::string& host);
// The IPv4 address of interface `ifname`; ConfigurationError when it has none.
std::string interface_address(const std::string& ifname);

// The first IPv4 address of an interface that is up and not loopback; 127.0.0.1 if none.
std::string first_external_address();

// A listening socket on address:port (port 0: any free port), close-on-exec.
Fd listen_on(const std::string& address, int port, int backlog = 128);
Endpoint local_endpoint(int fd);
std::string peer_address(int fd);

// Connects, retrying refused connections (the listener may not be up yet; unless
// `retry_refused` is false) until `deadline`. Returns an invalid Fd on expiry or refusal;
// `last_error` says why. A connection to itself (a local port nobody listens on, taken as its
// own source port) counts as refused.
Fd connect_until(const Endpoint& endpoint, Clock::time_point deadline, std::string& last_error,
                 bool retry_refused = true);

void set_nonblocking(int fd);
void set_nodelay(int fd);
// Whether both ends of a connected socket have the same address (or the peer's is a loopback
// one): its peer is a process of this host.
bool within_host(int fd);
// A TCP socket's congestion control ("cubic", "bbr"); empty when unknown.
std::string congestion_control(int fd);
// Sets it; false, errno saying why, where the kernel has no such algorithm (ENOENT) or does
// not let this process choose it (EPERM: net.ipv4.tcp_allowed_congestion_control).
bool set_congestion_control(int fd, const std::string& name);

// Reads/writes exactly `bytes`, waiting with poll() until `deadline`. Return false on
// timeout, throw SystemError/PeerError (with `what` in the message) on failure or EOF, and
// PeerError once `gone_fd` (when given) is readable: the caller learnt that the peer has gone
// and what answers at its address may be another process.
bool write_all(int fd, const void* data, std::size_t bytes, Clock::time_point deadline,
               const char* what, int gone_fd = -1);
bool read_all(int fd, void* data, std::size_t bytes, Clock::time_point deadline, const char* what,
              int gone_fd = -1);

// Milliseconds until `deadline` for poll(), clamped to [0, INT_MAX].
int poll_timeout_ms(Clock::time_point deadline);

// Reads and drops what arrives on `fds` until each peer closes its end or `deadline` passes:
// closing a socket with unread data sends a reset, which can make the peer drop what it was
// last sent before reading it.
void drain_until_closed(const std::vector<int>& fds, Clock::time_point deadline);

}  // namespace arcoll::net
