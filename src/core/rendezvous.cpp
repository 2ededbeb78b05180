#include "src/core/rendezvous.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/cpu_location.hpp"
#include "src/base/env.hpp"
#include "src/base/log.hpp"

namespace arcoll {
namespace {

using net::Clock;

// Emulated hosts are named "<machine>#<index>"; real host names never hold the separator.
constexpr char kEmulatedHostSeparator = '#';

// The CPUs this process may run on: '1' at each one's index, up to the last; empty where
// unknown.
std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::string cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) {
      cpus.resize(static_cast<std::size_t>(c), '0');
      cpus += '1';
    }
  return cpus;
}

// The machine behind a host name: emulated hosts of one machine share its cores.
std::string machine_of(const std::string& host) {
  return host.substr(0, host.find(kEmulatedHostSeparator));
}

// Marks the rendezvous entry of a rank that failed before it could join, followed by why.
const std::string kFailedToJoin =
    "\x01"
    "failed: ";

// Joining ends with this key: "" once every rank has joined, else why not.
const std::string kJoinedKey = "joined/all";
// Two processes of one rank: who they are.
const std::string kDuplicateKey = "joined/duplicate";

// The settings that shape messages or connections, and the world size, which every rank must
// share; rank 0's are published and the others compare theirs.
std::vector<std::pair<std::string, std::string>> shared_settings(const Options& o, int size) {
  return {{"world size", std::to_string(size)},
          {"ARCOLL_CHECKSUM", o.checksum ? "1" : "0"},
          {"ARCOLL_WIRE", std::string(to_string(o.wire))},
          {"ARCOLL_CHUNK_BYTES", std::to_string(o.chunk_bytes)},
          {"ARCOLL_CHANNELS", std::to_string(o.channels)},
          {"ARCOLL_TCP_CONGESTION", o.tcp_congestion}};
}

void check_shared_settings(StoreClient& store, const Options& options, int rank, int size,
                           Clock::time_point deadline) {
  std::string mine;
  for (const auto& [name, value] : shared_settings(options, size)) mine += name + "=" + value + "\n";
  if (rank == 0) store.set("settings", mine);
  auto theirs = store.get("settings", deadline);
  if (!theirs) throw TimeoutError("rendezvous", "rank 0 did not publish its settings", rank, 0);
  if (*theirs == mine) return;
  for (const auto& [name, value] : shared_settings(options, size)) {
    const std::string key = name + "=";
    const std::size_t at = theirs->find(key);
    const std::string other =
        at == std::string::npos
            ? "unset"
            : theirs->substr(at + key.size(), theirs->find('\n', at) - at - key.size());
    if (other != value)
      throw ConfigurationError("rendezvous",
                               name + " is " + value + " on this rank but " + other +
                                   " on rank 0: every rank must use the same",
                               rank, 0);
  }
}

// "host h, pid 123": the process behind a rank, in messages about two of them.
std::string this_process(const std::string& host) {
  return "host " + host + ", pid " + std::to_string(::getpid());
}

// Without job tokens that tell them apart, the ranks of two jobs started on one master address
// reach the same store: the first process of each rank number has it, a second one is refused,
// told why, and marks the job, whose ranks still joining then fail naming both processes
// rather than run with a stranger among them.
void claim_rank(StoreClient& store, int rank, const std::string& host) {
  const std::string key = "claim/" + std::to_string(rank);
  if (store.add(key, 1) == 1) {
    store.set(key + "/by", this_process(host));
    return;
  }
  const auto first = store.get(key + "/by", Clock::now() + std::chrono::seconds(1));
  const std::string both = "rank " + std::to_string(rank) + " (" + first.value_or("?") +
                           ", and " + this_process(host) + ")";
  store.set(kDuplicateKey, both);
  throw ConfigurationError(
      "rendezvous",
      "another process already joined as rank " + std::to_string(rank) + " (" +
          first.value_or("?") +
          "): are two jobs using the same master address and port? Give each its own port, or "
          "its own job token (ARCOLL_JOB_TOKEN)",
      rank);
}

// Every rank's host name, and into `r` the NUMA node each runs on, the CPUs each may run on and
// where each one's agreement on survivors listens.
std::vector<std::string> gather_hosts(Rendezvous& r, const std::string& host,
                                      const std::string& survivors_endpoint,
                                      std::chrono::milliseconds timeout,
                                      Clock::time_point deadline) {
  StoreClient& store = *r.store;
  store.set("node/" + std::to_string(r.rank),
            host + '\n' + std::to_string(numa_node_of_cpu(::sched_getcpu())) + '\n' +
                allowed_cpus() + '\n' + survivors_endpoint);
  std::vector<std::string> hosts(static_cast<std::size_t>(r.size));
  r.numa_of.assign(static_cast<std::size_t>(r.size), -1);
  r.survivors_endpoints.assign(static_cast<std::size_t>(r.size), "");
  r.cpus_of.assign(static_cast<std::size_t>(r.size), "");
  std::vector<int> missing;
  std::optional<PeerError> failed;  // the first rank that said it could not join
  int present = 0;                  // other ranks that published their host
  bool store_gone = false;          // rank 0 gave up first: what was not published stays missing
  for (int p = 0; p < r.size; ++p) {
    // After the first rank is found missing or failed, only look at what the others already
    // published.
    const bool waiting = missing.empty() && !failed;
    std::optional<std::string> value;
    if (!store_gone) try {
        value = store.get("node/" + std::to_string(p), waiting ? deadline : Clock::now());
      } catch (const PeerError&) {
        store_gone = true;
      }
    if (value && value->starts_with(kFailedToJoin)) {
      if (!failed)
        failed.emplace(
            "rendezvous",
            "rank " + std::to_string(p) + " could not join: " + value->substr(kFailedToJoin.size()),
            r.rank, p);
      continue;
    }
    if (value) {
      // "host\nnuma\nallowed cpus\nsurvivors endpoint": the last field is the rest.
      std::vector<std::string> fields;
      std::size_t at = 0;
      for (std::size_t end; fields.size() < 3 && (end = value->find('\n', at)) != std::string::npos;
           at = end + 1)
        fields.push_back(value->substr(at, end - at));
      fields.push_back(value->substr(std::min(at, value->size())));
      fields.resize(4);
      const auto i = static_cast<std::size_t>(p);
      hosts[i] = fields[0];
      if (!fields[1].empty()) r.numa_of[i] = std::atoi(fields[1].c_str());
      r.cpus_of[i] = fields[2];
      r.survivors_endpoints[i] = fields[3];
      present += p != r.rank;
    } else
      missing.push_back(p);
  }
  // Rank 0 holds the store: when the rendezvous failed, it keeps the store until the others
  // have read why (or a short while), so that they report the cause and not its absence.
  if (r.rank != 0 && !store_gone) try {
      store.add("rendezvous/read", 1);
    } catch (const PeerError&) {
    }
  if (r.rank == 0 && (failed || !missing.empty())) {
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < until && store.add("rendezvous/read", 0) < present)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (failed) throw *failed;
  if (!missing.empty()) {
    std::string list;
    for (int p : missing) list += (list.empty() ? "" : ", ") + std::to_string(p);
    throw TimeoutError(
        "rendezvous",
        "rank(s) " + list + " of " + std::to_string(r.size) +
            " did not join within the timeout (" + seconds_text(timeout) +
            ", ARCOLL_TIMEOUT): did they start, with the same master address?" +
            (store_gone ? " (rank 0 gave up first and closed the rendezvous store)" : ""),
        r.rank, missing.front());
  }
  return hosts;
}

}  // namespace

std::string seconds_text(std::chrono::milliseconds timeout) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(timeout.count()) / 1000.0);
  return text;
}

std::string host_name_of(int rank, int size) {
  std::string name;
  if (auto id = env::get("ARCOLL_NODE_ID")) {
    name = *id;
  } else {
    char host[256] = {};
    name = ::gethostname(host, sizeof host - 1) == 0 ? host : "localhost";
  }
  if (auto hosts = env::get("ARCOLL_EMULATED_HOSTS")) {
    const int n = std::atoi(hosts->c_str());
    if (n < 1)
      throw InvalidArgument("communicator",
                            "ARCOLL_EMULATED_HOSTS='" + *hosts + "' is not a number of hosts >= 1",
                            rank);
    name += kEmulatedHostSeparator +
            std::to_string(static_cast<long long>(rank) * std::min(n, size) / size);
  }
  return name;
}

std::string listen_address(const LaunchInfo& launch, const Options& options) {
  if (launch.world_size <= 1) return "";
  // Rank 0's transports listen where the others were told to find it (its store may listen
  // on every interface).
  return !options.socket_ifname.empty() ? net::interface_address(options.socket_ifname)
                                        : net::address_reaching(launch.master_addr.empty()
                                                                    ? "127.0.0.1"
                                                                    : launch.master_addr);
}

Rendezvous join(const LaunchInfo& launch, const Options& options, const std::string& host,
                const std::string& survivors_endpoint, Clock::time_point deadline) {
  Rendezvous r;
  r.rank = launch.rank;
  r.size = launch.world_size;
  r.job_token = launch.job_token;
  r.hosts = {host};
  if (r.size > 1) {
    net::Endpoint master{launch.master_addr, launch.master_port};
    if (r.rank == 0) {
      net::Fd listener = launch.store_listen_fd >= 0
                             ? net::Fd(launch.store_listen_fd)
                             : net::listen_on(net::numeric_address(master.host), master.port);
      r.server = std::make_unique<StoreServer>(std::move(listener), launch.job_token);
      master = r.server->endpoint();
    }
    // A store that listened before its address was given out (split, shrink) refuses only
    // once its rank is gone: no retry then.
    r.store = std::make_unique<StoreClient>(master, deadline, r.rank, launch.job_token,
                                            !launch.store_listening, launch.store_gone_fd);
    claim_rank(*r.store, r.rank, host);
    if (r.rank == 0 && launch.job_token.empty())
      log::warn(
          "no job token (ARCOLL_JOB_TOKEN): connections to this job are checked for being "
          "arcoll's, not for being this job's; launchers other than arcoll's and mpirun "
          "should set one");
    if (r.rank == 0) {
      std::random_device device;
      std::uint64_t job = (static_cast<std::uint64_t>(device()) << 32) ^ device();
      r.store->set("job", std::to_string(job));
    }
    auto job = r.store->get("job", deadline);
    if (!job) throw TimeoutError("rendezvous", "rank 0 did not publish the job id", r.rank, 0);
    r.job_id = std::stoull(*job);
    try {
      check_shared_settings(*r.store, options, r.rank, r.size, deadline);
    } catch (const Error& e) {
      // In place of this rank's host name: the others stop waiting for it, naming the cause.
      mark_failed_to_join(*r.store, r.rank, e.what());
      throw;
    }
    r.listen_address = listen_address(launch, options);
    r.hosts = gather_hosts(r, host, survivors_endpoint, options.timeout, deadline);
  } else {
    r.numa_of = {numa_node_of_cpu(::sched_getcpu())};
  }
  std::vector<std::string> order;  // hosts numbered by their lowest rank
  for (const auto& h : r.hosts)
    if (std::find(order.begin(), order.end(), h) == order.end()) order.push_back(h);
  for (const auto& h : r.hosts)
    r.host_of.push_back(static_cast<int>(std::find(order.begin(), order.end(), h) - order.begin()));
  r.host_count = static_cast<int>(order.size());
  r.host_id = r.host_of[static_cast<std::size_t>(r.rank)];
  r.local_size = static_cast<int>(std::count(r.hosts.begin(), r.hosts.end(), host));
  r.local_rank = static_cast<int>(std::count(r.hosts.begin(), r.hosts.begin() + r.rank, host));
  // The CPUs that the ranks of this machine may run on, all told: a job confined to fewer
  // cores than ranks (taskset, a container's cpuset) is oversubscribed however many the
  // machine has. (2 ranks under taskset -c 0, polling as if each had a core: 8-byte
  // all-reduces of 1 ms, each rank spinning out its millisecond before the other could run.)
  // A rank that could not tell its CPUs counts as free to run on all of them.
  long on_machine = 0;
  bool all_told = true;
  std::string cpus;  // '1' at each CPU some rank of this machine may run on
  for (std::size_t p = 0; p < r.hosts.size(); ++p) {
    if (machine_of(r.hosts[p]) != machine_of(host)) continue;
    ++on_machine;
    const std::string allowed = p < r.cpus_of.size() ? r.cpus_of[p] : "";
    all_told = all_told && !allowed.empty();
    if (allowed.size() > cpus.size()) cpus.resize(allowed.size(), '0');
    for (std::size_t c = 0; c < allowed.size(); ++c)
      if (allowed[c] == '1') cpus[c] = '1';
  }
  const long usable = all_told ? std::count(cpus.begin(), cpus.end(), '1')
                               : ::sysconf(_SC_NPROCESSORS_ONLN);
  r.oversubscribed = on_machine > usable;
  return r;
}

namespace {

// Rank 0 keeps its store until every other rank has read how joining ended (a rank that
// failed to join counts as having read it).
void release_store(const Rendezvous& r, Clock::time_point deadline) {
  StoreClient& store = *r.store;
  if (r.rank != 0) {
    if (store.add("joined/read", 1) == r.size - 1) store.set("joined/read/all", "");
  } else if (r.size > 1 && !store.get("joined/read/all", deadline)) {
    throw TimeoutError("rendezvous", "not every rank read that all had joined", r.rank);
  }
}

}  // namespace

void mark_failed_to_join(StoreClient& store, int rank, const std::string& why) {
  store.set("node/" + std::to_string(rank), kFailedToJoin + why);
}

void fail_join(const Rendezvous& r, const Error& e) noexcept {
  if (!r.store) return;
  try {
    r.store->set(kJoinedKey, kFailedToJoin + "rank " + std::to_string(r.rank) + ": " + e.what());
    release_store(r, Clock::now() + std::chrono::seconds(2));
  } catch (const Error&) {
  }
}

void finish_join(const Rendezvous& r, Clock::time_point deadline) {
  if (!r.store) return;
  StoreClient& store = *r.store;
  if (store.add("joined/count", 1) == r.size) store.set(kJoinedKey, "");
  const auto joined = store.get(kJoinedKey, deadline);
  if (!joined)
    throw TimeoutError("rendezvous",
                       "not every rank finished joining (setting up its transports) within the "
                       "timeout",
                       r.rank);
  const auto both = store.get(kDuplicateKey, Clock::now());
  release_store(r, deadline);
  store.finish_joining();
  if (joined->starts_with(kFailedToJoin))
    throw PeerError("rendezvous", "a rank could not join: " + joined->substr(kFailedToJoin.size()),
                    r.rank);
  if (both)
    throw ConfigurationError("rendezvous",
                             "two processes joined this job as " + *both +
                                 ": are two jobs using the same master address and port? Give "
                                 "each its own port, or its own job token (ARCOLL_JOB_TOKEN)",
                             r.rank);
}

}  // namespace arcoll
