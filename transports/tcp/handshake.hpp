// How a TCP connection between two ranks begins. The higher rank connects; the listener sends
// a challenge; the connecting rank answers with its Hello and a MAC of it under the job's
// token. The listener admits a connection only once both are right for this job, within 10 s;
// strangers that connect to it during the job are turned away the same way, and logged.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "src/base/auth.hpp"
#include "src/base/socket.hpp"
#include "transports/tcp/frame.hpp"
#include "transports/transport.hpp"

namespace arcoll::tcp {

// The connecting half: `sockets_per_peer` greeted sockets to each rank of `setup.peers` below
// this one, at the address it published in the store. TimeoutError or ProtocolError naming
// the peer when they cannot be by `setup.deadline`.
struct Dialed {
  net::Fd fd;
  int peer = -1;
  int index = 0;
};
std::vector<Dialed> connect_to_lower_ranks(const TransportSetup& setup, int sockets_per_peer);

// The listening half: connections accepted until their Hello has come. Their fds wait in the
// transport's epoll set with kEpollTag | fd as their data.
class Acceptor {
 public:
  static constexpr std::uint64_t kEpollTag = 1ull << 63;

  Acceptor(std::string job_token, HelloExpectation expect)
      : job_token_(std::move(job_token)), expect_(expect) {}

  // Accepts every connection waiting on `listener` and sends it a challenge.
  void accept_all(int listener, int epoll);

  struct Greeted {
    net::Fd fd;
    Hello hello;
    std::string address;  // the connecting side's, for messages
  };
  // Reads what pending `fd` sent. Once its greeting is complete the fd leaves `epoll` and
  // this acceptor: it comes back when the greeting answered right for this job, else it is
  // closed with a warning. nullopt until then, and for a rejected one.
  std::optional<Greeted> read(int fd, int epoll);

  // Closes the connections that did not greet within 10 s.
  void drop_stale(int epoll);
  bool idle() const { return pending_.empty(); }

 private:
  struct Pending {
    net::Fd fd;
    std::string address;
    auth::Challenge challenge{};
    struct Greeting {
      Hello hello;
      auth::Mac mac;
    } greeting{};
    static_assert(sizeof(Greeting) == sizeof(Hello) + sizeof(auth::Mac));
    std::size_t got = 0;
    net::Clock::time_point since;
  };

  std::string job_token_;  // what connecting ranks must prove they know
  HelloExpectation expect_;
  std::map<int, Pending> pending_;  // by fd
};

}  // namespace arcoll::tcp
