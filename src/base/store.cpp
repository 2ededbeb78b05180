#include "src/base/store.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <vector>

#include "arcoll/error.hpp"
#include "src/base/auth.hpp"
#include "src/base/log.hpp"

namespace arcoll {

namespace store_protocol {

std::string validate(const RequestHeader& header) {
  if (header.magic != kMagic) return "bad magic (not an arcoll store client)";
  if (header.version != kVersion)
    return "protocol version " + std::to_string(header.version) + ", expected " +
           std::to_string(kVersion);
  if (header.type < static_cast<std::uint8_t>(Type::set) ||
      header.type > static_cast<std::uint8_t>(Type::add))
    return "unknown request type " + std::to_string(header.type);
  if (header.key_len == 0 || header.key_len > kMaxKey)
    return "key length " + std::to_string(header.key_len) + " outside 1.." +
           std::to_string(kMaxKey);
  if (header.value_len > kMaxValue)
    return "value length " + std::to_string(header.value_len) + " above " +
           std::to_string(kMaxValue);
  return {};
}

namespace {

std::string reply_bytes(Status status, const std::string& value) {
  ReplyHeader header{kMagic,
                     static_cast<std::uint8_t>(status),
                     {0, 0, 0},
                     static_cast<std::uint32_t>(value.size())};
  std::string out(reinterpret_cast<const char*>(&header), sizeof header);
  return out + value;
}

// A get waits at most this long, whatever it asks: a deadline stays far from overflow.
constexpr std::int64_t kMaxWaitMs = 24ll * 3600 * 1000;

}  // namespace

std::string Table::handle(int client, std::string& in, const Reply& reply) {
  while (in.size() >= sizeof(RequestHeader)) {
    RequestHeader header;
    std::memcpy(&header, in.data(), sizeof header);
    if (std::string why = validate(header); !why.empty()) return why;
    const std::size_t total = sizeof header + header.key_len + header.value_len;
    if (in.size() < total) return {};
    std::string key = in.substr(sizeof header, header.key_len);
    std::string value = in.substr(sizeof header + header.key_len, header.value_len);
    in.erase(0, total);
    switch (static_cast<Type>(header.type)) {
      case Type::set:
        data_[key] = std::move(value);
        reply(client, reply_bytes(Status::ok, {}));
        wake(key, reply);
        break;
      case Type::get:
        if (auto it = data_.find(key); it != data_.end()) {
          reply(client, reply_bytes(Status::ok, it->second));
        } else {
          const auto wait =
              std::chrono::milliseconds(std::clamp<std::int64_t>(header.arg, 0, kMaxWaitMs));
          waiters_.push_back(Waiter{client, key, net::Clock::now() + wait});
        }
        break;
      case Type::add: {
        // Unsigned arithmetic: counters wrap instead of overflowing.
        std::uint64_t current = 0;
        if (auto it = data_.find(key); it != data_.end() && it->second.size() == sizeof current)
          std::memcpy(&current, it->second.data(), sizeof current);
        current += static_cast<std::uint64_t>(header.arg);
        std::string stored(reinterpret_cast<const char*>(&current), sizeof current);
        data_[key] = stored;
        reply(client, reply_bytes(Status::ok, stored));
        wake(key, reply);
        break;
      }
    }
  }
  return {};
}

void Table::wake(const std::string& key, const Reply& reply) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->key != key) {
      ++it;
      continue;
    }
    reply(it->client, reply_bytes(Status::ok, data_[key]));
    it = waiters_.erase(it);
  }
}

void Table::expire(net::Clock::time_point now, const Reply& reply) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline > now) {
      ++it;
      continue;
    }
    reply(it->client, reply_bytes(Status::missing, {}));
    it = waiters_.erase(it);
  }
}

void Table::drop(int client) {
  waiters_.remove_if([client](const Waiter& w) { return w.client == client; });
}

std::optional<net::Clock::time_point> Table::next_deadline() const {
  std::optional<net::Clock::time_point> earliest;
  for (const Waiter& w : waiters_)
    if (!earliest || w.deadline < *earliest) earliest = w.deadline;
  return earliest;
}

}  // namespace store_protocol

using namespace store_protocol;

namespace {

constexpr std::size_t kMaxClients = 4096;

struct Client {
  net::Fd fd;
  std::string peer;
  auth::Challenge challenge{};
  bool authenticated = false;
  bool refused = false;  // told why; closed once it has read that
  std::string in;   // bytes received, not yet parsed
  std::string out;  // reply bytes not yet sent
};

}  // namespace

struct StoreServer::State {
  std::string token;
  net::Fd listener;
  net::Fd wake_read, wake_write;
  std::map<int, Client> clients;  // by id
  int next_id = 0;
  Table table;
  // Replies go to the client's output, unless it is gone.
  Table::Reply reply = [this](int id, std::string bytes) {
    if (auto c = clients.find(id); c != clients.end()) c->second.out += bytes;
  };

  void accept_clients() {
    while (true) {
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (clients.size() >= kMaxClients) {
        log::warn("rendezvous store: too many connections, refusing " + net::peer_address(fd));
        ::close(fd);
        continue;
      }
      net::set_nodelay(fd);
      Client c;
      c.fd.reset(fd);
      c.peer = net::peer_address(fd);
      c.challenge = auth::make_challenge();
      // A fresh socket's buffer takes these few bytes at once.
      if (::send(fd, &c.challenge, sizeof c.challenge, MSG_NOSIGNAL) != sizeof c.challenge)
        continue;
      clients.emplace(next_id++, std::move(c));
    }
  }

  // Parses complete requests in client `id`; false when the client must be dropped.
  bool handle_input(int id, Client& c) {
    if (c.refused) {
      c.in.clear();
      return true;
    }
    if (!c.authenticated) {
      auth::Mac mac;
      if (c.in.size() < mac.size()) return true;
      std::memcpy(mac.data(), c.in.data(), mac.size());
      if (!auth::same(mac, auth::answer(token, "store", c.challenge))) {
        log::warn("rendezvous store: rejected connection from " + c.peer +
                  ": wrong or missing job token (ARCOLL_JOB_TOKEN)");
        // Its first request reads why, instead of finding the connection gone.
        c.out += reply_bytes(Status::refused,
                             "wrong or missing job token (ARCOLL_JOB_TOKEN): this process is "
                             "not of the job that store serves (two jobs on one master "
                             "address and port?)");
        c.refused = true;
        c.in.clear();
        return true;
      }
      c.in.erase(0, mac.size());
      c.authenticated = true;
    }
    if (std::string why = table.handle(id, c.in, reply); !why.empty()) {
      log::warn("rendezvous store: rejected connection from " + c.peer + ": " + why);
      return false;
    }
    return true;
  }

  void drop(int id) {
    table.drop(id);
    clients.erase(id);
  }

  // Writes what the socket takes now; false when the client is gone.
  static bool send_some(Client& c) {
    ssize_t n = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
    if (n > 0) c.out.erase(0, static_cast<std::size_t>(n));
    return n > 0 || errno == EAGAIN || errno == EINTR;
  }

  // On stopping: the replies still unsent go out first, for a short while at most (a rank
  // reading its last reply as rank 0 leaves gets it, not a lost connection).
  void flush_replies() {
    const auto deadline = net::Clock::now() + std::chrono::seconds(1);
    while (net::Clock::now() < deadline) {
      std::vector<pollfd> waiting;
      for (auto& [id, c] : clients)
        if (!c.out.empty() && send_some(c) && !c.out.empty())
          waiting.push_back({c.fd.get(), POLLOUT, 0});
      if (waiting.empty()) return;
      ::poll(waiting.data(), waiting.size(), net::poll_timeout_ms(deadline));
    }
  }
};

StoreServer::StoreServer(net::Fd listener, std::string token) : state_(std::make_unique<State>()) {
  state_->token = std::move(token);
  endpoint_ = net::local_endpoint(listener.get());
  net::set_nonblocking(listener.get());
  state_->listener = std::move(listener);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw SystemError("rendezvous store", std::string("pipe(): ") + std::strerror(errno));
  state_->wake_read.reset(pipe_fds[0]);
  state_->wake_write.reset(pipe_fds[1]);
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  char byte = 0;
  [[maybe_unused]] auto n = ::write(state_->wake_write.get(), &byte, 1);
  thread_.join();
}

void StoreServer::serve() {
  State& s = *state_;
  std::vector<pollfd> fds;
  std::vector<int> ids;
  while (true) {
    fds.clear();
    ids.clear();
    fds.push_back({s.wake_read.get(), POLLIN, 0});
    fds.push_back({s.listener.get(), POLLIN, 0});
    for (auto& [id, c] : s.clients) {
      short events = POLLIN;
      if (!c.out.empty()) events |= POLLOUT;
      fds.push_back({c.fd.get(), events, 0});
      ids.push_back(id);
    }
    const auto earliest = s.table.next_deadline();
    const int timeout = earliest ? net::poll_timeout_ms(*earliest) : -1;
    int ready = ::poll(fds.data(), fds.size(), timeout);
    if (ready < 0 && errno != EINTR) {
      log::error(std::string("rendezvous store: poll(): ") + std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) {  // shutting down
      s.flush_replies();
      return;
    }
    if (fds[1].revents & POLLIN) s.accept_clients();
    for (std::size_t i = 2; i < fds.size(); ++i) {
      int id = ids[i - 2];
      auto it = s.clients.find(id);
      if (it == s.clients.end()) continue;
      Client& c = it->second;
      bool keep = true;
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buffer[64 * 1024];
        ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
        if (n > 0) {
          c.in.append(buffer, static_cast<std::size_t>(n));
          keep = s.handle_input(id, c);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          keep = false;  // client gone: normal at the end of a job
        }
      }
      if (keep && !c.out.empty() && (fds[i].revents & POLLOUT)) {
        keep = State::send_some(c);
        if (keep && c.refused && c.out.empty()) ::shutdown(c.fd.get(), SHUT_WR);
      }
      if (!keep) s.drop(id);
    }
    s.table.expire(net::Clock::now(), s.reply);
  }
}

StoreClient::StoreClient(const net::Endpoint& endpoint, net::Clock::time_point deadline, int rank,
                         const std::string& token, bool retry_refused, int gone_fd)
    : endpoint_(endpoint),
      rank_(rank),
      gone_(gone_fd >= 0 ? ::fcntl(gone_fd, F_DUPFD_CLOEXEC, 0) : -1) {
  std::string why;
  fd_ = net::connect_until(endpoint, deadline, why, retry_refused);
  if (!fd_ && !retry_refused && net::Clock::now() < deadline)
    throw PeerError("rendezvous",
                    "rank 0's rendezvous store, which listened before, refused the connection (" +
                        why + "): rank 0 has gone",
                    rank, 0);
  if (!fd_)
    throw TimeoutError("rendezvous",
                       "could not reach rank 0's rendezvous store at " + endpoint.str() +
                           " before the timeout (" + why +
                           "); is rank 0 running, and is the master address/port right?",
                       rank, 0);
  net::set_nodelay(fd_.get());
  auth::Challenge challenge{};
  try {
    if (!net::read_all(fd_.get(), &challenge, sizeof challenge, deadline, "rendezvous",
                       gone_.get()))
      throw TimeoutError("rendezvous", "rank 0's store at " + endpoint.str() + " sent no challenge",
                         rank, 0);
    if (challenge.magic != auth::kChallengeMagic)
      throw ProtocolError("rendezvous", endpoint.str() + " is not an arcoll rendezvous store", rank,
                          0);
    const auth::Mac mac = auth::answer(token, "store", challenge);
    if (!net::write_all(fd_.get(), mac.data(), mac.size(), deadline, "rendezvous", gone_.get()))
      throw TimeoutError("rendezvous", "rank 0's store did not take the handshake", rank, 0);
  } catch (const PeerError& e) {
    lost_store("rendezvous", e);
  }
}

void StoreClient::lost_store(const char* operation, const PeerError& e) const {
  throw PeerError(operation,
                  "lost the connection to rank 0's store at " + endpoint_.str() + " (" +
                      e.message() + "); rank 0 has exited or crashed",
                  rank_, 0);
}

std::optional<std::string> StoreClient::round_trip(Type type, const std::string& key,
                                                   const std::string& value, std::int64_t arg,
                                                   net::Clock::time_point deadline) {
  std::lock_guard lock(mutex_);
  RequestHeader header{kMagic,
                       kVersion,
                       static_cast<std::uint8_t>(type),
                       0,
                       static_cast<std::uint32_t>(key.size()),
                       static_cast<std::uint32_t>(value.size()),
                       arg};
  if (std::string why = validate(header); !why.empty())
    throw InvalidArgument("rendezvous store", "request for key '" + key + "': " + why, rank_);
  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  bytes += key;
  bytes += value;
  // The server answers a get by its own deadline; allow it a moment beyond ours.
  auto io_deadline = deadline + std::chrono::seconds(5);
  auto fail = [&](const char* what) -> std::optional<std::string> {
    throw TimeoutError("rendezvous store",
                       std::string(what) + " for key '" + key + "' at " + endpoint_.str() +
                           " timed out (rank 0 unresponsive?)",
                       rank_, 0);
  };
  try {
    if (!net::write_all(fd_.get(), bytes.data(), bytes.size(), io_deadline, "rendezvous store",
                        gone_.get()))
      return fail("request");
    ReplyHeader reply;
    if (!net::read_all(fd_.get(), &reply, sizeof reply, io_deadline, "rendezvous store",
                       gone_.get()))
      return fail("reply");
    if (reply.magic != kMagic || reply.value_len > kMaxValue ||
        reply.status > static_cast<std::uint8_t>(Status::refused))
      throw ProtocolError("rendezvous store", "malformed reply from " + endpoint_.str(), rank_, 0);
    std::string out(reply.value_len, '\0');
    if (!net::read_all(fd_.get(), out.data(), out.size(), io_deadline, "rendezvous store",
                       gone_.get()))
      return fail("reply");
    if (reply.status == static_cast<std::uint8_t>(Status::refused))
      throw ConfigurationError("rendezvous store",
                               "the store at " + endpoint_.str() + " refused this process: " + out,
                               rank_, 0);
    if (reply.status == static_cast<std::uint8_t>(Status::missing)) return std::nullopt;
    return out;
  } catch (const PeerError& e) {
    lost_store("rendezvous store", e);
  }
}

void StoreClient::set(const std::string& key, const std::string& value,
                      net::Clock::time_point deadline) {
  round_trip(Type::set, key, value, 0, deadline);
}

std::optional<std::string> StoreClient::get(const std::string& key,
                                            net::Clock::time_point deadline) {
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - net::Clock::now());
  return round_trip(Type::get, key, {}, std::max<std::int64_t>(wait.count(), 0), deadline);
}

std::int64_t StoreClient::add(const std::string& key, std::int64_t delta) {
  auto value = round_trip(Type::add, key, {}, delta, net::Clock::now() + std::chrono::seconds(30));
  std::int64_t result = 0;
  if (value && value->size() == sizeof result) std::memcpy(&result, value->data(), sizeof result);
  return result;
}

}  // namespace arcoll
