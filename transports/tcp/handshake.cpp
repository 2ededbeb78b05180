#include "transports/tcp/handshake.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string_view>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "src/base/store.hpp"

namespace arcoll::tcp {
namespace {

constexpr auto kGreetingTimeout = std::chrono::seconds(10);

std::string_view bytes_of(const Hello& hello) {
  return {reinterpret_cast<const char*>(&hello), sizeof hello};
}

net::Fd connect_and_greet(const net::Endpoint& endpoint, const Hello& hello,
                          const std::string& job_token, net::Clock::time_point deadline,
                          int rank, int peer) {
  std::string why;
  net::Fd fd = net::connect_until(endpoint, deadline, why);
  if (!fd) throw TimeoutError("tcp setup", "cannot connect: " + why, rank, peer);
  // The listener's challenge, then our Hello with the answer under the job token.
  auth::Challenge challenge{};
  if (!net::read_all(fd.get(), &challenge, sizeof challenge, deadline, "tcp setup"))
    throw TimeoutError("tcp setup", "handshake timed out", rank, peer);
  if (challenge.magic != auth::kChallengeMagic)
    throw ProtocolError("tcp setup", endpoint.str() + " is not an arcoll rank", rank, peer);
  const auth::Mac mac = auth::answer(job_token, "tcp", challenge, bytes_of(hello));
  if (!net::write_all(fd.get(), &hello, sizeof hello, deadline, "tcp setup") ||
      !net::write_all(fd.get(), mac.data(), mac.size(), deadline, "tcp setup"))
    throw TimeoutError("tcp setup", "handshake timed out", rank, peer);
  return fd;
}

}  // namespace

std::vector<Dialed> connect_to_lower_ranks(const TransportSetup& setup, int sockets_per_peer) {
  std::vector<Dialed> dialed;
  for (int p : setup.peers) {
    if (p > setup.rank) break;
    auto value = setup.store->get("tcp/" + std::to_string(p), setup.deadline);
    net::Endpoint endpoint;
    if (!value)
      throw TimeoutError("tcp setup", "rank " + std::to_string(p) + " never published its address",
                         setup.rank, p);
    if (!net::parse_endpoint(*value, endpoint))
      throw ProtocolError("tcp setup", "malformed address '" + *value + "'", setup.rank, p);
    for (int k = 0; k < sockets_per_peer; ++k) {
      const Hello hello = make_hello(setup.rank, setup.size, k, setup.job_id);
      dialed.push_back({connect_and_greet(endpoint, hello, setup.job_token, setup.deadline,
                                          setup.rank, p),
                        p, k});
    }
  }
  return dialed;
}

void Acceptor::accept_all(int listener, int epoll) {
  while (true) {
    int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    Pending& c = pending_[fd];
    c.fd.reset(fd);
    c.address = net::peer_address(fd);
    c.since = net::Clock::now();
    c.challenge = auth::make_challenge();
    // A fresh socket's buffer takes these few bytes at once.
    if (::send(fd, &c.challenge, sizeof c.challenge, MSG_NOSIGNAL) != sizeof c.challenge) {
      pending_.erase(fd);
      continue;
    }
    epoll_event ev{EPOLLIN, {.u64 = kEpollTag | static_cast<std::uint64_t>(fd)}};
    epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev);
  }
}

std::optional<Acceptor::Greeted> Acceptor::read(int fd, int epoll) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return std::nullopt;
  Pending& c = it->second;
  ssize_t n =
      ::recv(fd, reinterpret_cast<char*>(&c.greeting) + c.got, sizeof c.greeting - c.got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return std::nullopt;
  std::string why;
  const Hello& hello = c.greeting.hello;
  if (n <= 0)
    why = "closed before completing the handshake";
  else if ((c.got += static_cast<std::size_t>(n)) < sizeof c.greeting)
    return std::nullopt;
  else if (!auth::same(c.greeting.mac,
                       auth::answer(job_token_, "tcp", c.challenge, bytes_of(hello))))
    why = "wrong or missing job token (ARCOLL_JOB_TOKEN)";
  else
    why = validate(hello, expect_);
  epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nullptr);
  Greeted greeted{std::move(c.fd), hello, std::move(c.address)};
  pending_.erase(it);
  if (!why.empty()) {
    log::warn("tcp transport: rejected connection from " + greeted.address + ": " + why);
    return std::nullopt;
  }
  return greeted;
}

void Acceptor::drop_stale(int epoll) {
  const auto now = net::Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (now - it->second.since < kGreetingTimeout) {
      ++it;
      continue;
    }
    log::warn("tcp transport: rejected connection from " + it->second.address +
              ": no handshake within 10 s");
    epoll_ctl(epoll, EPOLL_CTL_DEL, it->first, nullptr);
    it = pending_.erase(it);
  }
}

}  // namespace arcoll::tcp
