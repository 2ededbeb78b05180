// measure_tuning (arcoll/tuning.hpp): link costs measured over a communicator, as collectives
// load the links. A user of the public API, above the core that reads the figures.
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/tuning.hpp"
#include "src/base/cpu_location.hpp"
#include "src/base/reduce.hpp"
#include "topology/exchange_rates.hpp"
#include "topology/tuning_probe.hpp"

namespace arcoll {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kSmallBytes = 8;
constexpr int kSmallRounds = 200;
// Messages that fit a fragment: how their bytes cost more than those of large ones.
constexpr std::size_t kSmallMessage = static_cast<std::size_t>(kSmallMessageBytes);
constexpr std::size_t kLargeBytes = static_cast<std::size_t>(kUncachedBytes);
constexpr int kLargeRounds = 16;
// Exchanges that stay in the caches: as many bytes in all as one large exchange.
constexpr std::size_t kCachedBytesPerExchange = static_cast<std::size_t>(kCachedBytes);
constexpr int kCachedRounds = static_cast<int>(kLargeBytes / kCachedBytesPerExchange);
constexpr int kTag = 7001;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What exchanges cost the cores, without a partner: copies in and out of a buffer of `bytes`
// for `seconds`, for a rank left alone while the others measure.
void copy_load(std::size_t bytes, double seconds) {
  std::vector<char> out(bytes, 1), in(bytes);
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  constexpr std::size_t kPiece = 1 << 20;  // the clock is read between pieces
  for (std::size_t at = 0; Clock::now() < until; at = (at + kPiece) % bytes) {
    const std::size_t n = std::min(kPiece, bytes - at);
    std::memcpy(in.data() + at, out.data() + at, n);
    std::memcpy(out.data() + at, in.data() + at, n);
  }
}

// Median time of `rounds` exchanges of `bytes` each way with `peer`, both directions at once:
// a step of a collective, where every rank sends and receives, in messages of the
// communicator's chunk size as collectives send them (a transport may carry messages of
// another size another way). The median, as a loaded host deschedules a rank now and then.
double exchange_seconds(Communicator& comm, int peer, std::size_t bytes, int rounds) {
  std::vector<char> out(bytes), in(bytes);
  const std::size_t piece = std::min(bytes, std::max<std::size_t>(comm.options().chunk_bytes, 1));
  auto exchange = [&] {
    for (std::size_t at = 0; at < bytes; at += piece) {
      const std::size_t n = std::min(piece, bytes - at);
      comm.sendrecv(out.data() + at, n, peer, in.data() + at, n, peer, kTag);
    }
  };
  for (int i = 0; i < std::max(2, rounds / 10); ++i) exchange();  // warm-up
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    exchange();
    times.push_back(seconds_since(start));
  }
  std::nth_element(times.begin(), times.begin() + rounds / 2, times.end());
  return times[static_cast<std::size_t>(rounds / 2)];
}

// GB/s of an f32 sum of `bytes` (larger than the caches, or within them), `passes` times
// over: the median of a few runs, as the other ranks of a loaded host reduce at the same time.
double reduce_gbs(std::size_t bytes, int passes) {
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> a(count, 1.0f), b(count, 2.0f);
  kernels::reduce(a.data(), a.data(), b.data(), count, DataType::f32, ReduceOp::sum);  // warm
  std::vector<double> times;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    for (int pass = 0; pass < passes; ++pass)
      kernels::reduce(a.data(), a.data(), b.data(), count, DataType::f32, ReduceOp::sum);
    times.push_back(seconds_since(start) / passes);
  }
  std::nth_element(times.begin(), times.begin() + 2, times.end());
  return static_cast<double>(count * sizeof(float)) / times[2] / 1e9;
}

std::string today() {
  char text[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}

// Every rank's host, by rank. Collective.
std::vector<std::int32_t> hosts_of_ranks(Communicator& comm) {
  std::vector<std::int32_t> node_of(static_cast<std::size_t>(comm.size()));
  const std::int32_t mine = comm.node_id();
  comm.allgather(&mine, node_of.data(), 1, DataType::i32);
  return node_of;
}

// GB/s each way of exchanges with `partner` that stay in the caches, α being `alpha`.
double cached_exchange_gbs(Communicator& comm, int partner, double alpha) {
  const double seconds =
      exchange_seconds(comm, partner, kCachedBytesPerExchange, kCachedRounds);
  return exchange_gbs(kCachedBytesPerExchange, seconds, alpha);
}

// The name of the transport `counted` ranks measured over (to `partner`): that of the lowest
// counted rank, told to the others by a broadcast. Empty where no rank counted.
std::string measured_transport(Communicator& comm, bool counted, int partner) {
  std::array<char, 32> name{};
  if (counted) comm.transport_to(partner).copy(name.data(), name.size() - 1);
  std::int32_t holder = counted ? comm.rank() : comm.size();
  comm.allreduce(&holder, 1, DataType::i32, ReduceOp::min);
  if (holder == comm.size()) return "";
  comm.broadcast(name.data(), name.size(), DataType::u8, holder);
  return name.data();
}

// What a rank does in one round of measurement, as a ring step loads the links: `partner` to
// exchange with (-1: none), and whether its figures count.
struct Role {
  int partner = -1;
  bool counted = false;
};

// Within hosts (`across` false): local ranks 0-1, 2-3, ... all counted. Across hosts: local
// rank 0 of host 0 with that of host 1, host 2 with 3, ... counted; as in a ring step, one
// rank per host crosses, while the host's other ranks exchange among themselves (1-2, 3-4,
// ...), loading the cores as the step's shared-memory transfers do.
std::vector<Role> roles(const std::vector<std::int32_t>& node_of, bool across) {
  const int size = static_cast<int>(node_of.size());
  std::vector<int> local(node_of.size());
  for (int r = 0; r < size; ++r)
    local[static_cast<std::size_t>(r)] = static_cast<int>(
        std::count(node_of.begin(), node_of.begin() + r, node_of[static_cast<std::size_t>(r)]));
  std::vector<Role> role(node_of.size());
  for (int r = 0; r < size; ++r)
    for (int s = 0; s < size; ++s) {
      const auto [nr, ns] =
          std::pair(node_of[static_cast<std::size_t>(r)], node_of[static_cast<std::size_t>(s)]);
      const auto [lr, ls] =
          std::pair(local[static_cast<std::size_t>(r)], local[static_cast<std::size_t>(s)]);
      const bool crossing = across && lr == 0 && ls == 0 && (nr ^ 1) == ns;
      const bool within =
          nr == ns && (across ? lr > 0 && ls > 0 && ((lr - 1) ^ 1) == ls - 1 : (lr ^ 1) == ls);
      if (crossing || within) role[static_cast<std::size_t>(r)] = {s, !across || crossing};
    }
  return role;
}

}  // namespace

Tuning measure_tuning(Communicator& comm) {
  // Collectives keep every rank busy at once, each sending and receiving in every step: on a
  // host with fewer cores than ranks, or over transports whose copies take the ranks' own
  // cores, a one-way ping-pong of two ranks alone sees costs the collectives never get. So
  // the ranks measure at the same time, in pairs (see roles), bandwidth from exchanges both
  // ways at once; the figures are the means over the counted pairs. Across hosts one pair
  // per host crosses: the cost model itself divides a host's link among ranks that cross
  // together.
  const std::vector<std::int32_t> node_of = hosts_of_ranks(comm);
  const double gamma_gbs = reduce_gbs(32u << 20, 1);  // all at once too
  const double cached_gamma_gbs = reduce_gbs(kCachedBytesPerExchange, 16);

  Tuning tuning;
  for (const bool across : {false, true}) {
    const Role role = roles(node_of, across)[static_cast<std::size_t>(comm.rank())];
    // Summed over the counted pairs: latency (us), bandwidth (GB/s), reduction (GB/s), the
    // same two in cache, bandwidth of small messages, ranks.
    double figures[7] = {0, 0, 0, 0, 0, 0, 0};
    // α as a collective's step moves data: a small message each way at once, through a whole
    // call, rather than half a one-way ping-pong's round trip. Across hosts, α and small
    // messages are measured before the ranks left alone start copying (below): a copying rank
    // holds the core a waiting one shares with it for a whole time slice, where a
    // collective's waiting ranks sleep (2 hosts of 2 ranks on 2 cores: α of 2-4 ms instead of
    // 17-23 µs). Within a host, small messages come last, once the large exchanges have
    // warmed the path: measured first, they came out a quarter slower.
    double alpha = 0, small = 0;
    auto measure_small = [&] {
      small = exchange_seconds(comm, role.partner, kSmallMessage, kSmallRounds);
    };
    if (role.partner >= 0) {
      alpha = exchange_seconds(comm, role.partner, kSmallBytes, kSmallRounds);
      if (across) measure_small();
    }
    // Across hosts, ranks left alone copy for as long as the pairs measure the rest: a probe
    // of two exchanges tells them how long that is. (Within hosts every rank but an odd one
    // is paired.)
    double probe = 0;
    if (across) {
      if (role.partner >= 0) probe = exchange_seconds(comm, role.partner, kLargeBytes, 2);
      comm.allreduce(&probe, 1, DataType::f64, ReduceOp::max);
    }
    if (role.partner >= 0) {
      const double large = exchange_seconds(comm, role.partner, kLargeBytes, kLargeRounds);
      const double cached_gbs = cached_exchange_gbs(comm, role.partner, alpha);
      if (!across) measure_small();
      if (role.counted) {
        figures[0] = alpha * 1e6;
        figures[1] = exchange_gbs(kLargeBytes, large, alpha);
        figures[2] = gamma_gbs;
        figures[3] = cached_gbs;
        figures[4] = cached_gamma_gbs;
        figures[5] = exchange_gbs(kSmallMessage, small, alpha);
        figures[6] = 1;
      }
    } else if (across) {
      // The large exchanges and their warm-up, then the cached ones (as many bytes as one
      // large exchange, and warm-up), with time to spare: copying past the pairs' end only
      // delays the sum below.
      copy_load(kLargeBytes, probe * (kLargeRounds + 5));
    }
    comm.allreduce(figures, 7, DataType::f64, ReduceOp::sum);
    if (figures[6] == 0) continue;  // one host, or one rank per host
    // Every counted pair of a round crosses the same kind of link.
    const std::string name = measured_transport(comm, role.counted, role.partner);
    const double pairs = figures[6];
    // The same transport within hosts and across: the first round's figures keep a key of
    // their own.
    if (across)
      if (auto within = tuning.transports.extract(name)) {
        within.key() = within_hosts_key(name);
        tuning.transports.insert(std::move(within));
      }
    tuning.transports[name] = {figures[0] / pairs, figures[1] / pairs, figures[2] / pairs,
                               figures[3] / pairs, figures[4] / pairs, figures[5] / pairs};
  }
  // The smallest cache, so that every rank's predictions use the same figures.
  double cache = last_level_cache_bytes(::sched_getcpu());
  comm.allreduce(&cache, 1, DataType::f64, ReduceOp::min);
  tuning.last_level_cache_bytes = cache;
  tuning.measured_on = std::to_string(comm.size()) + " ranks on " +
                       std::to_string(comm.node_count()) + " host(s), rank 0 on " +
                       comm.node_name() + ", " + today();
  return tuning;
}

WithinHostCosts within_host_costs_now(Communicator& comm) {
  const std::vector<std::int32_t> node_of = hosts_of_ranks(comm);
  const Role role = roles(node_of, /*across=*/false)[static_cast<std::size_t>(comm.rank())];
  // Latency (us), rate and pairs, summed over the pairs.
  double figures[3] = {0, 0, 0};
  if (role.partner >= 0) {
    const double alpha = exchange_seconds(comm, role.partner, kSmallBytes, kSmallRounds / 10);
    figures[0] = alpha * 1e6;
    figures[1] = cached_exchange_gbs(comm, role.partner, alpha);
    figures[2] = 1;
  }
  comm.allreduce(figures, 3, DataType::f64, ReduceOp::sum);
  const std::string name = measured_transport(comm, role.partner >= 0, role.partner);
  // Where that transport crosses hosts too, measure_tuning kept its figures within hosts under
  // a key of their own.
  std::int32_t crosses = 0;
  for (int peer = 0; peer < comm.size(); ++peer)
    if (node_of[static_cast<std::size_t>(peer)] != comm.node_id() &&
        comm.transport_to(peer) == name)
      crosses = 1;
  comm.allreduce(&crosses, 1, DataType::i32, ReduceOp::max);
  if (name.empty()) return {};
  return {crosses != 0 ? within_hosts_key(name) : name, figures[0] / figures[2],
          figures[1] / figures[2]};
}

}  // namespace arcoll
