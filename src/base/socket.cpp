#include "src/base/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <thread>

#include "arcoll/error.hpp"

namespace arcoll::net {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

bool parse_endpoint(const std::string& text, Endpoint& out) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  char* end = nullptr;
  long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) return false;
  out.host = text.substr(0, colon);
  out.port = static_cast<int>(port);
  return true;
}

sockaddr_in resolve(const Endpoint& endpoint, const char* operation) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(endpoint.port));
  if (inet_pton(AF_INET, endpoint.host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(endpoint.host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr)
    throw ConfigurationError(operation,
                             "cannot resolve host '" + endpoint.host + "': " + gai_strerror(rc));
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(result->ai_addr)->sin_addr;
  freeaddrinfo(result);
  return addr;
}

std::string to_string(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

std::string numeric_address(const std::string& host) {
  sockaddr_in addr = resolve(Endpoint{host, 0}, "address lookup");
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return text;
}

std::string address_reaching(const std::string& host) {
  sockaddr_in target = resolve(Endpoint{host, 9}, "address lookup");
  Fd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe) throw SystemError("address lookup", "socket(): " + errno_text(errno));
  if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&target), sizeof target) != 0)
    throw SystemError("address lookup", "no route to " + host + ": " + errno_text(errno));
  sockaddr_in local{};
  socklen_t len = sizeof local;
  getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &len);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

std::string interface_address(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0)
    throw SystemError("interface lookup", "getifaddrs(): " + errno_text(errno));
  std::string found;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if (ifname != it->ifa_name) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
    break;
  }
  freeifaddrs(list);
  if (found.empty())
    throw ConfigurationError(
        "interface lookup",
        "interface '" + ifname + "' (ARCOLL_SOCKET_IFNAME) does not exist or has no IPv4 address");
  return found;
}

std::string first_external_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string found = "127.0.0.1";
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if ((it->ifa_flags & IFF_UP) == 0 || (it->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
    break;
  }
  freeifaddrs(list);
  return found;
}

Fd listen_on(const std::string& address, int port, int backlog) {
  sockaddr_in addr = resolve(Endpoint{address, port}, "listen");
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw SystemError("listen", "socket(): " + errno_text(errno));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw SystemError(
        "listen", "cannot bind " + address + ":" + std::to_string(port) + ": " + errno_text(errno));
  if (::listen(fd.get(), backlog) != 0)
    throw SystemError("listen", "listen(): " + errno_text(errno));
  return fd;
}

Endpoint local_endpoint(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return Endpoint{text, ntohs(addr.sin_port)};
}

std::string peer_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  return to_string(addr);
}

int poll_timeout_ms(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  // Round up so a wait never returns just before its deadline and spins (a wait of less
  // than a millisecond sleeps one).
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
}

void drain_until_closed(const std::vector<int>& fds, Clock::time_point deadline) {
  std::vector<pollfd> draining;
  for (int fd : fds) draining.push_back({fd, POLLIN, 0});
  char sink[64 * 1024];
  while (!draining.empty() && Clock::now() < deadline) {
    if (::poll(draining.data(), draining.size(), poll_timeout_ms(deadline)) <= 0) break;
    for (std::size_t i = 0; i < draining.size();) {
      bool ended = false;
      if (draining[i].revents != 0) {
        const ssize_t n = ::recv(draining[i].fd, sink, sizeof sink, MSG_DONTWAIT);
        ended = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
      }
      if (ended) {
        draining[i] = draining.back();
        draining.pop_back();
      } else {
        ++i;
      }
    }
  }
}

namespace {

// TCP lets a connection to a local port with no listener take that very port as its source,
// and connect to itself; the client then waits for its own answer until its deadline.
bool connected_to_itself(int fd) {
  sockaddr_in local{}, remote{};
  socklen_t local_length = sizeof local, remote_length = sizeof remote;
  return ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) == 0 &&
         ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_length) == 0 &&
         local.sin_port == remote.sin_port && local.sin_addr.s_addr == remote.sin_addr.s_addr;
}

}  // namespace

Fd connect_until(const Endpoint& endpoint, Clock::time_point deadline, std::string& last_error,
                 bool retry_refused) {
  sockaddr_in addr = resolve(endpoint, "connect");
  auto pause = std::chrono::milliseconds(10);
  while (true) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw SystemError("connect", "socket(): " + errno_text(errno));
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd pfd{fd.get(), POLLOUT, 0};
      int ready = ::poll(&pfd, 1, poll_timeout_ms(deadline));
      if (ready == 1) {
        socklen_t len = sizeof err;
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
    if (err == 0 && connected_to_itself(fd.get())) err = ECONNREFUSED;
    if (err == 0) {
      int flags = fcntl(fd.get(), F_GETFL);
      fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
      return fd;
    }
    last_error = "connect to " + endpoint.str() + ": " + errno_text(err);
    if (Clock::now() + pause >= deadline || (err == ECONNREFUSED && !retry_refused)) return Fd();
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(250));
  }
}

void set_nonblocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool within_host(int fd) {
  sockaddr_in local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
      local.sin_family != AF_INET || peer.sin_family != AF_INET)
    return false;
  const bool loopback = (ntohl(peer.sin_addr.s_addr) >> 24) == 127;
  return loopback || local.sin_addr.s_addr == peer.sin_addr.s_addr;
}

std::string congestion_control(int fd) {
  char name[16] = {};  // the kernel's TCP_CA_NAME_MAX
  socklen_t len = sizeof name;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return {};
  return std::string(name, strnlen(name, len));
}

bool set_congestion_control(int fd, const std::string& name) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                    static_cast<socklen_t>(name.size())) == 0;
}

namespace {

// Waits until fd is ready for `events`; false on deadline, PeerError once `gone_fd` (when not
// -1) is readable and fd is not ready.
bool wait_ready(int fd, short events, Clock::time_point deadline, int gone_fd, const char* what) {
  while (true) {
    pollfd pfds[2] = {{fd, events, 0}, {gone_fd, POLLIN, 0}};
    int rc = ::poll(pfds, gone_fd >= 0 ? 2 : 1, poll_timeout_ms(deadline));
    if (rc > 0 && pfds[0].revents != 0) return true;  // what came before the news counts
    if (rc > 0)
      throw PeerError(what, "gave up the connection to " + peer_address(fd) +
                                ": the process that listened there has gone");
    if (rc == 0) return false;
    if (errno != EINTR) throw SystemError("poll", errno_text(errno));
  }
}

}  // namespace

bool write_all(int fd, const void* data, std::size_t bytes, Clock::time_point deadline,
               const char* what, int gone_fd) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline, gone_fd, what)) return false;
      continue;
    }
    throw PeerError(what, "connection to " + peer_address(fd) + " failed: " + errno_text(errno));
  }
  return true;
}

bool read_all(int fd, void* data, std::size_t bytes, Clock::time_point deadline, const char* what,
              int gone_fd) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw PeerError(what, "connection closed by " + peer_address(fd));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline, gone_fd, what)) return false;
      continue;
    }
    throw PeerError(what, "connection to " + peer_address(fd) + " failed: " + errno_text(errno));
  }
  return true;
}

}  // namespace arcoll::net
