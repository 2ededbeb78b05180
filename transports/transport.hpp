// A transport moves the bytes of point-to-point requests between this rank and its peers.
// It knows nothing of collectives: the communicator hands it sends and receives, and drives
// it with progress(). Transports register themselves by name; --transport lists come from
// the registry.
#pragma once

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "arcoll/options.hpp"
#include "src/request.hpp"
#include "src/socket.hpp"

namespace arcoll {

class StoreClient;

struct TransportSetup {
  int rank = 0;
  int size = 1;
  // The other ranks this transport connects to, ascending; a communicator may give each
  // transport a part of its peers (shm within a host, tcp across hosts).
  std::vector<int> peers;
  StoreClient* store = nullptr;  // for exchanging addresses; null for a world of one
  const Options* options = nullptr;
  std::string listen_address;              // local IPv4 address to listen on
  std::uint64_t job_id = 0;                // shared by every rank of this job
  std::string job_token;                   // the job's secret (src/auth.hpp); may be empty
  net::Clock::time_point deadline;         // for connection setup
  std::chrono::microseconds busy_poll{0};  // how long a wait polls before sleeping
  bool poll_yields = false;  // polling gives the core away between polls (ranks > cores)
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;

  // Starts a send or receive to one of the peers it was set up for. Requests to one peer with the
  // same tag match in posting order.
  virtual void post(const RequestPtr& request) = 0;
  // Whether receives with a Request::reduction can be posted: the transport reduces the
  // message into the destination as it reads it, with no staging buffer in between.
  virtual bool reduces_on_receive() const { return false; }
  // Moves bytes of pending requests; waits for the network until `until` at most, returning
  // as soon as something happened.
  virtual void progress(net::Clock::time_point until) = 0;
  // The first peer failure seen (connection lost, abort received, malformed data), if any.
  // Once set, the transport fails every new request.
  virtual std::exception_ptr failure() const = 0;
  // One line per peer with pending work, for diagnosing a stuck job (ARCOLL_LOG=debug).
  virtual std::string pending_state() const = 0;
  // Tells every peer, best effort and without blocking, that this rank is failing.
  virtual void abort(const std::string& reason) noexcept = 0;
};

struct TransportInfo {
  std::string name;
  std::string summary;
  std::function<std::unique_ptr<Transport>(const TransportSetup&)> create;
};

class TransportRegistry {
 public:
  static TransportRegistry& instance();
  void add(TransportInfo info);
  const TransportInfo* find(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, TransportInfo> transports_;
};

struct TransportRegistrar {
  explicit TransportRegistrar(TransportInfo info) {
    TransportRegistry::instance().add(std::move(info));
  }
};

}  // namespace arcoll
