#include "arbench/links.hpp"

#include "arbench/text.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

namespace arbench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTag = 7100;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// `from` measures the way to `to`: one-way latency from ping-pongs, then the bandwidth of a
// stream of large messages that `to` acknowledges once it has them all. Only `from` gets
// figures.
void measure_pair(arcoll::Communicator& comm, int from, int to, const LinkSettings& s,
                  std::vector<char>& buffer, double& latency_us, double& bandwidth_gbs) {
  const bool sender = comm.rank() == from;
  const int peer = sender ? to : from;
  auto ping_pong = [&] {
    if (sender) {
      comm.send(buffer.data(), s.small_bytes, peer, kTag);
      comm.recv(buffer.data(), s.small_bytes, peer, kTag);
    } else {
      comm.recv(buffer.data(), s.small_bytes, peer, kTag);
      comm.send(buffer.data(), s.small_bytes, peer, kTag);
    }
  };
  for (int i = 0; i < std::max(2, s.small_rounds / 10); ++i) ping_pong();
  auto start = Clock::now();
  for (int i = 0; i < s.small_rounds; ++i) ping_pong();
  if (sender) latency_us = seconds_since(start) / s.small_rounds / 2 * 1e6;

  char ack = 0;
  start = Clock::now();
  for (int i = 0; i < s.large_messages; ++i) {
    if (sender)
      comm.send(buffer.data(), s.large_bytes, peer, kTag);
    else
      comm.recv(buffer.data(), s.large_bytes, peer, kTag);
  }
  if (sender) {
    comm.recv(&ack, 1, peer, kTag);
    bandwidth_gbs =
        static_cast<double>(s.large_bytes) * s.large_messages / seconds_since(start) / 1e9;
  } else {
    comm.send(&ack, 1, peer, kTag);
  }
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> pair_rounds(int ranks) {
  // Circle method: n slots (a dummy one when odd), slot n-1 fixed, the others rotating.
  const int n = ranks % 2 == 0 ? ranks : ranks + 1;
  std::vector<std::vector<std::pair<int, int>>> rounds;
  for (int r = 0; r + 1 < n; ++r) {
    std::vector<std::pair<int, int>> round;
    for (int k = 0; k < n / 2; ++k) {
      const int a = k == 0 ? n - 1 : (r + k) % (n - 1);
      const int b = (r - k + n - 1) % (n - 1);
      if (a < ranks && b < ranks) round.emplace_back(std::min(a, b), std::max(a, b));
    }
    rounds.push_back(round);
  }
  return rounds;
}

LinkMatrix measure_links(arcoll::Communicator& comm, const LinkSettings& settings) {
  const int p = comm.size();
  LinkMatrix m;
  m.ranks = p;
  m.slow_fraction = settings.slow_fraction;
  m.latency_us.assign(static_cast<std::size_t>(p) * static_cast<std::size_t>(p), 0.0);
  m.bandwidth_gbs = m.latency_us;
  std::vector<char> buffer(std::max(settings.small_bytes, settings.large_bytes));
  for (const auto& round : pair_rounds(p)) {
    comm.barrier();  // pairs of one round run together, rounds one after the other
    for (const auto& [a, b] : round) {
      if (comm.rank() != a && comm.rank() != b) continue;
      for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}})
        measure_pair(comm, from, to, settings, buffer, m.latency_us[m.index(from, to)],
                     m.bandwidth_gbs[m.index(from, to)]);
    }
  }
  // Each entry was filled by its sender only: the sums are the matrices.
  comm.allreduce(m.latency_us.data(), m.latency_us.size(), arcoll::DataType::f64,
                 arcoll::ReduceOp::sum);
  comm.allreduce(m.bandwidth_gbs.data(), m.bandwidth_gbs.size(), arcoll::DataType::f64,
                 arcoll::ReduceOp::sum);
  char mine[64] = {};
  std::strncpy(mine, comm.node_name().c_str(), sizeof mine - 1);
  std::vector<char> names(sizeof mine * static_cast<std::size_t>(p));
  comm.allgather(mine, names.data(), sizeof mine, arcoll::DataType::u8);
  for (int r = 0; r < p; ++r)
    m.hosts.emplace_back(names.data() + sizeof mine * static_cast<std::size_t>(r));

  std::vector<double> latencies, bandwidths;
  for (int from = 0; from < p; ++from)
    for (int to = 0; to < p; ++to)
      if (from != to) {
        latencies.push_back(m.latency(from, to));
        bandwidths.push_back(m.bandwidth(from, to));
      }
  m.median_latency_us = quantile(latencies, 0.5);
  m.median_bandwidth_gbs = quantile(bandwidths, 0.5);
  for (int from = 0; from < p; ++from)
    for (int to = 0; to < p; ++to)
      if (from != to && m.bandwidth(from, to) < settings.slow_fraction * m.median_bandwidth_gbs)
        m.slow.emplace_back(from, to);
  for (int r = 0; r < p && !m.slow.empty(); ++r)
    if (std::all_of(m.slow.begin(), m.slow.end(),
                    [&](const auto& pair) { return pair.first == r || pair.second == r; }))
      m.suspect = r;
  return m;
}

std::string links_text(const LinkMatrix& m) {
  std::string out;
  char line[256];
  auto table = [&](const char* title, auto value, const char* format) {
    out += std::string("# ") + title + " (row: from, column: to)\n#      ";
    for (int to = 0; to < m.ranks; ++to) {
      std::snprintf(line, sizeof line, " %8d", to);
      out += line;
    }
    out += "\n";
    for (int from = 0; from < m.ranks; ++from) {
      std::snprintf(line, sizeof line, "  %5d", from);
      out += line;
      for (int to = 0; to < m.ranks; ++to) {
        if (from == to)
          std::snprintf(line, sizeof line, " %8s", "-");
        else
          std::snprintf(line, sizeof line, format, value(from, to));
        out += line;
      }
      out += "\n";
    }
  };
  out += "# ranks and hosts:";
  for (int r = 0; r < m.ranks; ++r)
    out += " " + std::to_string(r) + "=" + m.hosts[static_cast<std::size_t>(r)];
  out += "\n";
  table(
      "one-way latency, us", [&](int f, int t) { return m.latency(f, t); }, " %8.2f");
  table(
      "bandwidth, GB/s", [&](int f, int t) { return m.bandwidth(f, t); }, " %8.3f");
  std::snprintf(line, sizeof line,
                "# median latency %.2f us, median bandwidth %.3f GB/s; flagged: below %.0f%% of "
                "the median bandwidth\n",
                m.median_latency_us, m.median_bandwidth_gbs, m.slow_fraction * 100);
  out += line;
  if (m.slow.empty()) return out + "# no slow pair\n";
  for (const auto& [from, to] : m.slow) {
    std::snprintf(line, sizeof line, "SLOW %d -> %d (%s -> %s): %.3f GB/s, %.0f%% of the median\n",
                  from, to, m.hosts[static_cast<std::size_t>(from)].c_str(),
                  m.hosts[static_cast<std::size_t>(to)].c_str(), m.bandwidth(from, to),
                  100 * m.bandwidth(from, to) / m.median_bandwidth_gbs);
    out += line;
  }
  if (m.suspect >= 0)
    out += "# every slow pair involves rank " + std::to_string(m.suspect) + " on " +
           m.hosts[static_cast<std::size_t>(m.suspect)] + ": its link or NIC is the suspect\n";
  return out;
}

std::string links_json(const LinkMatrix& m) {
  nlohmann::json pairs = nlohmann::json::array();
  for (int from = 0; from < m.ranks; ++from)
    for (int to = 0; to < m.ranks; ++to)
      if (from != to)
        pairs.push_back({{"from", from},
                         {"to", to},
                         {"latency_us", m.latency(from, to)},
                         {"bandwidth_gbs", m.bandwidth(from, to)},
                         {"slow", std::find(m.slow.begin(), m.slow.end(), std::pair{from, to}) !=
                                      m.slow.end()}});
  const nlohmann::json doc = {
      {"schema", "arcoll.arbench.links/1"},
      {"ranks", m.ranks},
      {"hosts", m.hosts},
      {"median_latency_us", m.median_latency_us},
      {"median_bandwidth_gbs", m.median_bandwidth_gbs},
      {"slow_fraction", m.slow_fraction},
      {"suspect_rank", m.suspect >= 0 ? nlohmann::json(m.suspect) : nlohmann::json(nullptr)},
      {"pairs", std::move(pairs)}};
  return doc.dump(2) + "\n";
}

}  // namespace arbench
