// Joining a job: rank 0 hosts the store the ranks meet at; they agree on a job id and on the
// settings that shape messages, and learn where every rank runs. A rank that cannot join says
// why in the store, so that the others name it and its reason instead of waiting out their
// timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "arcoll/error.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/options.hpp"
#include "src/base/socket.hpp"
#include "src/base/store.hpp"

namespace arcoll {

struct Rendezvous {
  int rank = 0;
  int size = 1;
  std::unique_ptr<StoreServer> server;  // rank 0's
  std::unique_ptr<StoreClient> store;   // null in a world of one
  std::uint64_t job_id = 0;
  std::string job_token;
  std::string listen_address;  // where this rank's transports listen
  std::vector<std::string> hosts;  // the host name of each rank
  std::vector<int> host_of;        // each rank's host, hosts numbered by their lowest rank
  std::vector<int> numa_of;        // the NUMA node each rank joined from; -1 unknown
  // Where each rank's agreement on survivors listens (src/core/survivors.hpp).
  std::vector<std::string> survivors_endpoints;
  // The CPUs each rank may run on ('1' at each one's index); empty where unknown.
  std::vector<std::string> cpus_of;
  int host_count = 1;
  int host_id = 0;
  int local_rank = 0;
  int local_size = 1;
  // The ranks on this machine outnumber the cores they may run on (emulated hosts of a machine
  // share them).
  bool oversubscribed = false;

  bool same_host(int a, int b) const {
    return host_of[static_cast<std::size_t>(a)] == host_of[static_cast<std::size_t>(b)];
  }
};

// The host this rank runs on: its host name (ARCOLL_NODE_ID when set), split into pretend
// hosts of consecutive ranks under ARCOLL_EMULATED_HOSTS=N.
std::string host_name_of(int rank, int size);

// Where this rank's sockets listen: on ARCOLL_SOCKET_IFNAME's address, else on the one that
// reaches the master address; "" in a world of one.
std::string listen_address(const LaunchInfo& launch, const Options& options);
// Meets the other ranks of `launch`, waiting for them until `deadline`; this rank runs on
// `host`, and its agreement on survivors listens at `survivors_endpoint`. Throws naming the
// ranks that did not come or could not join.
Rendezvous join(const LaunchInfo& launch, const Options& options, const std::string& host,
                const std::string& survivors_endpoint, net::Clock::time_point deadline);

// Joining ends together: no rank leaves its constructor before every rank has set up its
// transports (one that returned and exited at once took its store, rank 0's, or its segment
// and listener from a rank still setting up), and rank 0's store serves until every rank has
// read that. A rank whose setup failed says so with fail_join(), and the others fail naming
// it instead of waiting out `deadline`; a second process of one rank fails them too.
void finish_join(const Rendezvous& rendezvous, net::Clock::time_point deadline);
void fail_join(const Rendezvous& rendezvous, const Error& error) noexcept;
// Says in `store`, for rank `rank`, that it cannot join, and why: the ranks that wait for it
// while joining fail at once, naming it (a rank that died, seen by another).
void mark_failed_to_join(StoreClient& store, int rank, const std::string& why);

// "60 s": a timeout as messages give it.
std::string seconds_text(std::chrono::milliseconds timeout);

}  // namespace arcoll
