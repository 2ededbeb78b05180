// The rendezvous key-value store: hosted by rank 0 on a background thread, reached by every
// rank over TCP. Ranks publish their addresses and wait for each other's through it.
//
// Wire format (little-endian), one request then one reply per round trip:
//   request: magic u32 'ARKV', version u16, type u8 (set/get/add), pad u8, key_len u32,
//            value_len u32, arg i64 (get: wait in ms; add: delta), key, value
//   reply:   magic u32, status u8 (ok/missing), pad u8[3], value_len u32, value
// Before its first request a client answers the server's challenge (src/base/auth.hpp) with the
// job token; a wrong answer is answered with a refusal (status refused, the reason as its
// value) and the connection closed once it is read; anything else malformed is logged and the
// connection dropped; the store keeps serving the job. Replies still unsent when the server
// stops are flushed first (briefly), so that a rank's last request is answered.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "arcoll/error.hpp"
#include "src/base/socket.hpp"

namespace arcoll {

namespace store_protocol {
inline constexpr std::uint32_t kMagic = 0x564b5241;  // "ARKV"
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::uint32_t kMaxKey = 1024;
inline constexpr std::uint32_t kMaxValue = 16u << 20;
enum class Type : std::uint8_t { set = 1, get = 2, add = 3 };
enum class Status : std::uint8_t { ok = 0, missing = 1, refused = 2 };

struct RequestHeader {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint8_t type;
  std::uint8_t pad;
  std::uint32_t key_len;
  std::uint32_t value_len;
  std::int64_t arg;
};
static_assert(sizeof(RequestHeader) == 24 && offsetof(RequestHeader, arg) == 16);  // no padding
struct ReplyHeader {
  std::uint32_t magic;
  std::uint8_t status;
  std::uint8_t pad[3];
  std::uint32_t value_len;
};

// Empty when the header is acceptable, else why not.
std::string validate(const RequestHeader& header);

// The store's data and the requests acting on it, apart from sockets: the server feeds it the
// bytes its clients send, a fuzzer feeds it anything.
class Table {
 public:
  // Receives `bytes` for `client`; called for every reply, to this client or to one that waited.
  using Reply = std::function<void(int client, std::string bytes)>;
  // Applies the complete requests at the front of `in` from `client` (consumed), replying
  // through `reply`. Returns why the client must be dropped, empty if it may stay.
  std::string handle(int client, std::string& in, const Reply& reply);
  // Answers "missing" to the gets whose wait ended by `now`.
  void expire(net::Clock::time_point now, const Reply& reply);
  void drop(int client);
  std::optional<net::Clock::time_point> next_deadline() const;

 private:
  struct Waiter {
    int client;
    std::string key;
    net::Clock::time_point deadline;
  };
  void wake(const std::string& key, const Reply& reply);
  std::map<std::string, std::string> data_;
  std::list<Waiter> waiters_;
};
}  // namespace store_protocol

class StoreServer {
 public:
  // Serves on `listener` (a listening socket, taken over) the clients that know `token`.
  StoreServer(net::Fd listener, std::string token);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  net::Endpoint endpoint() const { return endpoint_; }

 private:
  struct State;
  void serve();
  net::Endpoint endpoint_;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

class StoreClient {
 public:
  // Connects, retrying until `deadline`, and answers the server's challenge with `token`;
  // TimeoutError naming rank 0 on expiry.
  // `retry_refused`: whether a refused connection is tried again until `deadline` (the store
  // may not listen yet). `gone_fd` (when given; this client keeps a copy until finish_joining()):
  // readable once the store's process is known to have gone, which ends every wait for its
  // answers at once (not the connect: a refused one ends at once without it).
  StoreClient(const net::Endpoint& endpoint, net::Clock::time_point deadline, int rank,
              const std::string& token, bool retry_refused = true, int gone_fd = -1);
  void set(const std::string& key, const std::string& value,
           net::Clock::time_point deadline = net::Clock::now() + std::chrono::seconds(30));
  // Waits until `key` exists or `deadline` passes (nullopt).
  std::optional<std::string> get(const std::string& key, net::Clock::time_point deadline);
  std::int64_t add(const std::string& key, std::int64_t delta);
  const net::Endpoint& endpoint() const { return endpoint_; }
  // Joining is over: news of the store's end no longer ends this client's waits (it may come
  // late, from a rank that went on with its communicator).
  void finish_joining() { gone_.reset(); }

 private:
  // A wait on the store ended by its connection's loss (net's PeerError names no rank): fails
  // naming this rank and rank 0.
  [[noreturn]] void lost_store(const char* operation, const PeerError& e) const;
  std::optional<std::string> round_trip(store_protocol::Type type, const std::string& key,
                                        const std::string& value, std::int64_t arg,
                                        net::Clock::time_point deadline);
  net::Endpoint endpoint_;
  int rank_;
  std::mutex mutex_;
  net::Fd fd_;
  net::Fd gone_;
};

}  // namespace arcoll
