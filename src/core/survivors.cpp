#include "src/core/survivors.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include "arcoll/error.hpp"
#include "src/base/auth.hpp"
#include "src/base/env.hpp"
#include "src/base/log.hpp"
#include "transports/common/peer_process.hpp"

namespace arcoll {
namespace {

using net::Clock;

constexpr std::uint32_t kHelloMagic = 0x56525341;  // "ASRV"
constexpr std::uint32_t kVersion = 1;

// The first bytes on a connection: who connects, for which agreement, and the proof that it
// knows the job's token. Its MAC covers the other fields, under a challenge made of the job,
// the epoch and both ranks, so a hello counts for this one pair and agreement only.
struct Hello {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t job_id;
  std::uint64_t epoch;
  std::int32_t from;
  std::int32_t to;
  auth::Mac mac;
};
static_assert(sizeof(Hello) == 64);

auth::Mac hello_mac(const std::string& token, std::uint64_t job_id, std::uint64_t epoch, int from,
                    int to) {
  auth::Challenge challenge{auth::kChallengeMagic, kVersion, {}};
  const std::uint64_t fields[2] = {job_id, epoch};
  static_assert(sizeof fields == sizeof challenge.nonce);
  std::memcpy(challenge.nonce.data(), fields, sizeof fields);
  return auth::answer(token, "survivors", challenge,
                      std::to_string(from) + " " + std::to_string(to));
}

// After the hello, frames: a 32-bit length, then a type and what it carries.
enum class Type : std::uint8_t {
  proposals = 1,  // a round's number, then the proposals the sender holds
  decided = 2,    // the proposals decided on
  excluded = 3,   // the sender decided that the receiver is out, and why
};

void put(std::string& out, const void* data, std::size_t bytes) {
  out.append(static_cast<const char*>(data), bytes);
}

std::string encode(const std::map<int, std::string>& proposals) {
  std::string out;
  const auto count = static_cast<std::uint32_t>(proposals.size());
  put(out, &count, sizeof count);
  for (const auto& [rank, offer] : proposals) {
    const auto r = static_cast<std::int32_t>(rank);
    const auto length = static_cast<std::uint32_t>(offer.size());
    put(out, &r, sizeof r);
    put(out, &length, sizeof length);
    out += offer;
  }
  return out;
}

// Reads what encode() wrote at `at`; nullopt when malformed.
std::optional<std::map<int, std::string>> decode(const std::string& in, std::size_t at, int size) {
  auto take = [&](void* into, std::size_t bytes) {
    if (in.size() - at < bytes) return false;
    std::memcpy(into, in.data() + at, bytes);
    at += bytes;
    return true;
  };
  std::uint32_t count = 0;
  if (!take(&count, sizeof count) || count > static_cast<std::uint32_t>(size)) return std::nullopt;
  std::map<int, std::string> proposals;
  for (std::uint32_t i = 0; i < count; ++i) {
    std::int32_t rank = 0;
    std::uint32_t length = 0;
    if (!take(&rank, sizeof rank) || !take(&length, sizeof length) || rank < 0 || rank >= size ||
        in.size() - at < length)
      return std::nullopt;
    proposals[rank] = in.substr(at, length);
    at += length;
  }
  if (at != in.size()) return std::nullopt;
  return proposals;
}

std::string frame(Type type, const std::string& body) {
  std::string out;
  const auto length = static_cast<std::uint32_t>(body.size() + 1);
  put(out, &length, sizeof length);
  out += static_cast<char>(type);
  out += body;
  return out;
}

// ARCOLL_FAULT_AGREEMENT=<rank>:<round>[:unheard], for testing: rank <rank> dies (SIGKILL) as
// it enters that round of an agreement, having sent the rounds before; round 0: once it has
// decided and sent its decision. With "unheard" it connects but sends nothing, not even its
// hello, so that the others hear of it only through the connections they made to it.
struct AgreementFault {
  int round = -1;  // -1: none for this rank
  bool unheard = false;
};
AgreementFault agreement_fault(int rank) {
  const auto fault = env::get("ARCOLL_FAULT_AGREEMENT");
  if (!fault) return {};
  int fault_rank = -1, round = -1, consumed = 0;
  const int fields = std::sscanf(fault->c_str(), "%d:%d%n", &fault_rank, &round, &consumed);
  const std::string rest = fields == 2 ? fault->substr(static_cast<std::size_t>(consumed)) : "";
  if (fields != 2 || round < 0 || (!rest.empty() && rest != ":unheard"))
    throw ConfigurationError(
        "environment",
        "ARCOLL_FAULT_AGREEMENT='" + *fault + "' must be <rank>:<round>[:unheard], round >= 0",
        rank);
  if (fault_rank != rank) return {};
  return {round, !rest.empty()};
}

std::string ranks_text(const std::set<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

}  // namespace

// One other rank during an agreement: the connection this rank sends on (made by it), the one
// it receives on (made by the peer), what waits to be sent and what has arrived.
struct Survivors::Peer {
  net::Fd out;
  bool connecting = false;
  std::string outbox;
  net::Fd in;
  std::string inbox;
};

Survivors::Survivors(int rank, int size, const std::string& address) : rank_(rank), size_(size) {
  const AgreementFault fault = agreement_fault(rank);
  fault_point_ = fault.round;
  fault_unheard_ = fault.unheard;
  if (size_ > 1) {
    listener_ = net::listen_on(address, 0);
    net::set_nonblocking(listener_.get());
  }
}

Survivors::~Survivors() = default;

std::string Survivors::endpoint() const {
  if (!listener_) return "";
  const net::Endpoint e = net::local_endpoint(listener_.get());
  return e.host + " " + std::to_string(e.port) + " " + transport::this_process_identity();
}

void Survivors::meet(const std::vector<std::string>& endpoints, std::uint64_t job_id,
                     std::string token) {
  addresses_.assign(endpoints.size(), {});
  processes_.clear();
  processes_.resize(endpoints.size());
  for (std::size_t p = 0; p < endpoints.size(); ++p) {
    std::istringstream text(endpoints[p]);
    std::string identity;
    text >> addresses_[p].host >> addresses_[p].port >> std::ws;
    std::getline(text, identity);
    // Watched now, while the process is surely the rank's.
    if (static_cast<int>(p) != rank_) processes_[p] = transport::watch_if_local(identity);
  }
  job_id_ = job_id;
  token_ = std::move(token);
}

void Survivors::leave() {
  listener_.reset();
}

Survivors::Decision Survivors::agree(const std::string& offer, Clock::time_point deadline) {
  const std::uint64_t epoch = ++epoch_;
  kept_.clear();
  kept_out_.clear();
  kept_in_.clear();
  failed_.clear();
  early_.erase(early_.begin(), early_.lower_bound(epoch));
  std::vector<Peer> peers(static_cast<std::size_t>(size_));
  std::set<int> correct;  // not known to have failed
  for (int p = 0; p < size_; ++p) correct.insert(p);
  std::set<int> dead, silenced;
  auto peer = [&](int p) -> Peer& { return peers[static_cast<std::size_t>(p)]; };
  auto fail_peer = [&](int p) {
    if (correct.erase(p) == 0) return;
    dead.insert(p);
    peer(p) = Peer{};
  };
  auto send = [&](int p, const std::string& bytes) {
    if (correct.count(p) != 0 && !fault_unheard_) peer(p).outbox += bytes;
  };
  const std::string operation = "shrink";

  // Connects to every other rank and says who this rank is; a refused connection is a death.
  if (!listener_ && size_ > 1)
    throw PeerError(operation, "this communicator was aborted: it takes no part in agreeing",
                    rank_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const sockaddr_in address =
        net::resolve(addresses_[static_cast<std::size_t>(p)], operation.c_str());
    net::Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw SystemError(operation, "socket(): " + std::string(std::strerror(errno)), rank_);
    const int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address);
    if (rc != 0 && errno != EINPROGRESS) {
      fail_peer(p);
      continue;
    }
    net::set_nodelay(fd.get());
    Peer& q = peer(p);
    q.out = std::move(fd);
    q.connecting = rc != 0;
    Hello hello{kHelloMagic,
                kVersion,
                job_id_,
                epoch,
                rank_,
                p,
                hello_mac(token_, job_id_, epoch, rank_, p)};
    if (!fault_unheard_) put(q.outbox, &hello, sizeof hello);
  }
  // Connections that peers made before this rank began the epoch.
  for (auto& [from, fd] : early_[epoch])
    if (correct.count(from) != 0) peer(from).in = std::move(fd);
  early_.erase(epoch);
  // Accepted connections whose hello has yet to arrive (some from before this epoch began).
  std::vector<std::pair<net::Fd, std::string>> unknown = std::move(unidentified_);
  unidentified_.clear();

  // The rounds (algorithm 5.1): proposals and senders heard in each round; round 0 heard all.
  int round = 1;
  std::map<int, std::map<int, std::string>> proposals;
  std::map<int, std::set<int>> heard;
  for (int p = 0; p < size_; ++p) heard[0].insert(p);
  std::optional<std::map<int, std::string>> decided;
  auto broadcast = [&](const std::string& bytes) {
    for (int p : correct)
      if (p != rank_) send(p, bytes);
  };
  auto enter_round = [&](const std::map<int, std::string>& held) {
    if (fault_point_ == round) ::raise(SIGKILL);
    heard[round].insert(rank_);
    proposals[round].insert(held.begin(), held.end());
    std::string body(sizeof(std::uint32_t), '\0');
    const auto r = static_cast<std::uint32_t>(round);
    std::memcpy(body.data(), &r, sizeof r);
    broadcast(frame(Type::proposals, body + encode(held)));
  };
  enter_round({{rank_, offer}});
  // A rank's exclusion ends this one's part: it says so, and is cut off as if dead.
  std::optional<std::string> excluded_by;

  // Handles one frame from `p`; false when it is malformed.
  auto receive = [&](int p, Type type, const std::string& body) {
    switch (type) {
      case Type::proposals: {
        std::uint32_t r = 0;
        if (body.size() < sizeof r) return false;
        std::memcpy(&r, body.data(), sizeof r);
        auto held = decode(body, sizeof r, size_);
        if (!held || r == 0 || r > static_cast<std::uint32_t>(size_) + 2) return false;
        heard[static_cast<int>(r)].insert(p);
        proposals[static_cast<int>(r)].insert(held->begin(), held->end());
        return true;
      }
      case Type::decided: {
        auto held = decode(body, 0, size_);
        if (!held) return false;
        if (!decided && correct.count(p) != 0) {
          decided = std::move(*held);
          broadcast(frame(Type::decided, encode(*decided)));
        }
        return true;
      }
      case Type::excluded:
        excluded_by = "rank " + std::to_string(p) + " excluded this rank: " + body;
        return true;
    }
    return false;
  };
  // Reads what `p`'s connection holds; a closed or broken connection, or a malformed frame,
  // is the peer's failure.
  auto read_from = [&](int p) {
    Peer& q = peer(p);
    char chunk[4096];
    for (;;) {
      const ssize_t got = ::recv(q.in.get(), chunk, sizeof chunk, 0);
      if (got > 0) {
        q.inbox.append(chunk, static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (got < 0 && errno == EINTR) continue;
      // Closed: what arrived before still counts (a decision sent just before the end).
      break;
    }
    bool closed = false;
    {
      char probe;
      const ssize_t got = ::recv(q.in.get(), &probe, 1, MSG_PEEK);
      closed = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    while (q.inbox.size() >= sizeof(std::uint32_t)) {
      std::uint32_t length = 0;
      std::memcpy(&length, q.inbox.data(), sizeof length);
      if (length == 0 || length > (1u << 24)) {
        log::warn(operation + ": rank " + std::to_string(p) + " sent a malformed frame");
        fail_peer(p);
        return;
      }
      if (q.inbox.size() < sizeof length + length) break;
      const auto type = static_cast<Type>(q.inbox[sizeof length]);
      const std::string body = q.inbox.substr(sizeof length + 1, length - 1);
      q.inbox.erase(0, sizeof length + length);
      if (!receive(p, type, body)) {
        log::warn(operation + ": rank " + std::to_string(p) + " sent a malformed frame");
        fail_peer(p);
        return;
      }
    }
    if (closed) fail_peer(p);
  };
  // A hello on an accepted connection: for this epoch it becomes the peer's; for a later one it
  // waits for it; an earlier epoch's, or a stranger's, is closed. False while it is incomplete.
  auto identify = [&](net::Fd& fd, const std::string& received) {
    if (received.size() < sizeof(Hello)) return false;
    Hello hello;
    std::memcpy(&hello, received.data(), sizeof hello);
    const bool valid =
        hello.magic == kHelloMagic && hello.version == kVersion && hello.job_id == job_id_ &&
        hello.to == rank_ && hello.from >= 0 && hello.from < size_ && hello.from != rank_ &&
        auth::same(hello.mac, hello_mac(token_, job_id_, hello.epoch, hello.from, rank_));
    if (!valid) {
      log::warn(operation + ": refused a connection from " + net::peer_address(fd.get()) +
                " that is not a rank of this communicator's job");
    } else if (hello.epoch > epoch) {
      early_[hello.epoch].emplace_back(hello.from, std::move(fd));
    } else if (hello.epoch == epoch && correct.count(hello.from) != 0) {
      peer(hello.from).in = std::move(fd);
      read_from(hello.from);
    }
    fd.reset();
    return true;
  };
  // Accepts what waits at the listener and reads the hellos that have arrived, so that an
  // exclusion sent while this rank was away is read before it counts the ranks it hears.
  auto take_connections = [&] {
    for (;;) {
      const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      unknown.emplace_back(net::Fd(fd), std::string());
    }
    std::erase_if(unknown, [&](std::pair<net::Fd, std::string>& u) {
      auto& [fd, received] = u;
      char chunk[sizeof(Hello)];
      const ssize_t got = ::recv(fd.get(), chunk, sizeof(Hello) - received.size(), 0);
      if (got > 0) received.append(chunk, static_cast<std::size_t>(got));
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        return true;  // gone before its hello was complete
      return identify(fd, received);
    });
  };

  // Once the deadline passes, the ranks not heard in the round are silenced, once; the rounds
  // that follow get a grace of moments.
  const auto grace = std::chrono::milliseconds(1000);
  bool deadline_passed = false;
  for (;;) {
    take_connections();
    if (excluded_by) break;
    // The round ends once every rank not known to have failed was heard in it.
    while (!decided && std::includes(heard[round].begin(), heard[round].end(), correct.begin(),
                                     correct.end())) {
      if (heard[round] == heard[round - 1]) {
        decided = proposals[round];
        broadcast(frame(Type::decided, encode(*decided)));
        break;
      }
      const std::map<int, std::string> held = proposals[round];
      ++round;
      enter_round(held);
    }
    // Done once the decision has left for every live rank.
    const bool flushed = std::all_of(correct.begin(), correct.end(),
                                     [&](int p) { return p == rank_ || peer(p).outbox.empty(); });
    if (decided && flushed) break;

    const auto now = Clock::now();
    if (now >= deadline && !deadline_passed) {
      deadline_passed = true;
      // The silent ranks (or those the decision cannot reach) are told they are out and cut
      // off; the rounds then end at once.
      for (int p : std::set<int>(correct))
        if (p != rank_ && (decided ? !peer(p).outbox.empty() : heard[round].count(p) == 0)) {
          Peer& q = peer(p);
          if (q.out && !q.connecting) {
            const std::string bytes =
                frame(Type::excluded, "it did not answer the others' agreement within the timeout");
            (void)::send(q.out.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            ::shutdown(q.out.get(), SHUT_WR);
            kept_.push_back(std::move(q.out));
          }
          silenced.insert(p);
          fail_peer(p);
        }
    }
    if (now >= deadline + grace) {
      if (decided) break;  // a rank the decision cannot reach fails to join the new communicator
      throw TimeoutError(operation,
                         "the survivors' agreement did not end within the timeout (live ranks: " +
                             ranks_text(correct) + ")",
                         rank_);
    }

    std::vector<pollfd> fds;
    // Per pollfd: a peer's connection (its rank), its process (size_ + rank), the listener (-1)
    // or unknown connection i (-2 - i).
    std::vector<int> owner;
    fds.push_back({listener_.get(), POLLIN, 0});
    owner.push_back(-1);
    for (std::size_t i = 0; i < unknown.size(); ++i) {
      fds.push_back({unknown[i].first.get(), POLLIN, 0});
      owner.push_back(-2 - static_cast<int>(i));
    }
    for (int p : correct) {
      if (p == rank_) continue;
      Peer& q = peer(p);
      if (q.in) {
        fds.push_back({q.in.get(), POLLIN, 0});
        owner.push_back(p);
      }
      if (q.out) {
        // Nothing ever comes back on the connection this rank sends on: readable means that
        // the peer closed it, which is how a peer that died before its own hello arrived is
        // found (the kernel had accepted the connection; the peer had read what it held).
        fds.push_back(
            {q.out.get(),
             static_cast<short>(q.connecting || !q.outbox.empty() ? POLLIN | POLLOUT : POLLIN), 0});
        owner.push_back(p);
      }
      if (const net::Fd& process = processes_[static_cast<std::size_t>(p)]; process) {
        fds.push_back({process.get(), POLLIN, 0});
        owner.push_back(size_ + p);
      }
    }
    const auto until = now < deadline ? deadline : deadline + grace;
    const int ready = ::poll(fds.data(), fds.size(), std::min(net::poll_timeout_ms(until), 100));
    if (ready < 0 && errno != EINTR)
      throw SystemError(operation, "poll(): " + std::string(std::strerror(errno)), rank_);
    if (ready <= 0) continue;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (owner[i] < 0) continue;  // the listener and hellos: take_connections()'s
      const int who = owner[i] % size_;
      if (correct.count(who) == 0) continue;
      Peer& q = peer(who);
      if (owner[i] >= size_) {
        // Its process ended: what it sent before counts, as for a closed connection.
        if (q.in) read_from(who);
        fail_peer(who);
        continue;
      }
      if (fds[i].fd == q.in.get()) {
        read_from(who);
        continue;
      }
      // The connection this rank sends on: its connect ended, or there is room to send.
      if (q.connecting) {
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(q.out.get(), SOL_SOCKET, SO_ERROR, &error, &length);
        if (error != 0) {
          fail_peer(who);
          continue;
        }
        q.connecting = false;
      }
      if ((fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
        // Closed by the peer: what it sent on its own connection first counts (a decision, or
        // this rank's exclusion).
        if (q.in) read_from(who);
        fail_peer(who);
        continue;
      }
      while (!q.outbox.empty()) {
        const ssize_t sent =
            ::send(q.out.get(), q.outbox.data(), q.outbox.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent > 0) {
          q.outbox.erase(0, static_cast<std::size_t>(sent));
          continue;
        }
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) break;
        fail_peer(who);
        break;
      }
    }
  }

  if (excluded_by) {
    leave();
    throw PeerError(operation, *excluded_by + "; it is not a member of the survivors' communicator",
                    rank_);
  }
  if (fault_point_ == 0) ::raise(SIGKILL);
  // A live rank closes no connection of the agreement: the others take a closed one for its
  // death. Those whose hello had yet to arrive stay open too, for the next agreement to read:
  // the peer may have known the decision from others before this rank heard from it, or have
  // begun the next agreement already (accepted before its hello came, the connection is that
  // agreement's; closed when it began here, the peer took this rank for dead).
  unidentified_ = std::move(unknown);
  for (int p = 0; p < size_; ++p) {
    Peer& q = peer(p);
    if (q.out) kept_out_[p] = std::move(q.out);
    if (q.in) kept_in_[p] = std::move(q.in);
  }
  Decision decision;
  decision.offers = std::move(*decided);
  for (const auto& [rank, offer] : decision.offers) decision.members.push_back(rank);
  if (decision.offers.count(rank_) == 0) {
    leave();
    throw PeerError(operation,
                    "the survivors decided without this rank (its proposal reached none of them "
                    "in time); it is not a member of their communicator",
                    rank_);
  }
  failed_ = dead;
  if (!dead.empty() || !silenced.empty())
    log::debug("rank " + std::to_string(rank_) + ": agreement #" + std::to_string(epoch) +
               " decided on ranks " +
               ranks_text({decision.members.begin(), decision.members.end()}) +
               (silenced.empty() ? "" : "; silent, excluded: " + ranks_text(silenced)));
  return decision;
}

int Survivors::first_closed(const std::vector<int>& members, Clock::time_point until) {
  for (int m : members)
    if (failed_.erase(m) != 0) return m;  // failed during the agreement, after its proposal
  // Either connection with a member closing says it is gone; on neither does anything but
  // its own decision come after the agreement.
  std::vector<pollfd> fds;
  std::vector<int> whose;
  for (int m : members)
    for (auto* kept : {&kept_in_, &kept_out_})
      if (auto it = kept->find(m); it != kept->end()) {
        fds.push_back({it->second.get(), POLLIN, 0});
        whose.push_back(m);
      }
  if (::poll(fds.data(), fds.size(), net::poll_timeout_ms(until)) <= 0) return -1;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    char drop[256];  // what came after the decision (a peer's own decision): not needed
    const ssize_t got = ::recv(fds[i].fd, drop, sizeof drop, MSG_DONTWAIT);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      kept_in_.erase(whose[i]);
      kept_out_.erase(whose[i]);
      return whose[i];
    }
  }
  return -1;
}

}  // namespace arcoll
