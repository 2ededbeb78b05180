#include "arbench/links.hpp"

#include "arbench/text.hpp"
#include "arcoll/topology.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

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


// The default route's NIC, when it is a device with a driver that reports its speed.
int nominal_nic_mbps() {
  for (const arcoll::NetworkInterface& n : arcoll::discover_network_interfaces())
    if (n.default_route && !n.loopback && !n.driver.empty() && n.speed_mbps > 0)
      return n.speed_mbps;
  return -1;
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
  m.nic_mbps.resize(static_cast<std::size_t>(p));
  const std::int32_t nic = nominal_nic_mbps();
  comm.allgather(&nic, m.nic_mbps.data(), 1, arcoll::DataType::i32);

  std::vector<double> latencies, bandwidths;
  for (int from = 0; from < p; ++from)
    for (int to = 0; to < p; ++to)
      if (from != to) {
        latencies.push_back(m.latency(from, to));
        bandwidths.push_back(m.bandwidth(from, to));
      }
  m.median_latency_us = quantile(latencies, 0.5);
  m.median_bandwidth_gbs = quantile(bandwidths, 0.5);
  judge_links(m, settings);
  return m;
}

void judge_links(LinkMatrix& m, const LinkSettings& settings) {
  const int p = m.ranks;
  m.slow_fraction = settings.slow_fraction;
  m.reference_gbs.assign(static_cast<std::size_t>(p) * static_cast<std::size_t>(p), 0.0);
  m.slow.clear();
  m.slow_hosts.clear();
  m.suspect = -1;
  std::vector<std::string> hosts;  // distinct, in rank order
  std::vector<int> host_of;
  for (const std::string& name : m.hosts) {
    auto it = std::find(hosts.begin(), hosts.end(), name);
    if (it == hosts.end()) it = hosts.insert(hosts.end(), name);
    host_of.push_back(static_cast<int>(it - hosts.begin()));
  }
  auto cross = [&](int from, int to) { return host_of[from] != host_of[to]; };
  // The median bandwidth of the pairs `take` accepts (0 when none).
  auto median_of = [&](auto take) {
    std::vector<double> values;
    for (int from = 0; from < p; ++from)
      for (int to = 0; to < p; ++to)
        if (from != to && take(from, to)) values.push_back(m.bandwidth(from, to));
    return values.empty() ? 0.0 : quantile(values, 0.5);
  };
  const int h = static_cast<int>(hosts.size());
  if (settings.baseline) {
    m.reference = "each pair against itself in " + settings.baseline->path;
    for (int from = 0; from < p; ++from)
      for (int to = 0; to < p; ++to)
        if (from != to) m.reference_gbs[m.index(from, to)] = settings.baseline->bandwidth_gbs[m.index(from, to)];
  } else {
    const double within = median_of([&](int f, int t) { return !cross(f, t); });
    for (int from = 0; from < p; ++from)
      for (int to = 0; to < p; ++to)
        if (from != to && !cross(from, to)) m.reference_gbs[m.index(from, to)] = within;
    if (settings.expected_gbs > 0 && h >= 2) {
      char text[96];
      std::snprintf(text, sizeof text, "the expected rate between hosts, %.3f GB/s (--expect)",
                    settings.expected_gbs);
      m.reference = text;
      for (int from = 0; from < p; ++from)
        for (int to = 0; to < p; ++to)
          if (cross(from, to)) m.reference_gbs[m.index(from, to)] = settings.expected_gbs;
    } else if (h >= 3) {
      m.reference = "each host's pairs against the pairs between the other hosts";
      for (int host = 0; host < h; ++host) {
        auto involves = [&](int f, int t) { return host_of[f] == host || host_of[t] == host; };
        const double others = median_of([&](int f, int t) { return cross(f, t) && !involves(f, t); });
        const double own = median_of([&](int f, int t) { return cross(f, t) && involves(f, t); });
        if (!(own < settings.slow_fraction * others)) continue;
        m.slow_hosts.push_back(hosts[static_cast<std::size_t>(host)]);
        for (int from = 0; from < p; ++from)
          for (int to = 0; to < p; ++to)
            if (from != to && cross(from, to) && involves(from, to))
              m.reference_gbs[m.index(from, to)] = others;
      }
    } else if (h == 2) {
      const int slowest_nic = *std::min_element(m.nic_mbps.begin(), m.nic_mbps.end());
      if (slowest_nic > 0) {
        m.reference = "the NICs' nominal speed, " + std::to_string(slowest_nic) + " Mb/s";
        for (int from = 0; from < p; ++from)
          for (int to = 0; to < p; ++to)
            if (cross(from, to))
              m.reference_gbs[m.index(from, to)] =
                  std::min(m.nic_mbps[static_cast<std::size_t>(from)],
                           m.nic_mbps[static_cast<std::size_t>(to)]) / 8000.0;
      } else {
        m.reference = "none for the link between the 2 hosts (no other pair to compare it "
                      "with, no NIC that reports its speed: give --baseline with an earlier "
                      "run's --json, or --expect RATE)";
      }
    } else {
      m.reference = "the median of every pair";
    }
  }
  for (int from = 0; from < p; ++from)
    for (int to = 0; to < p; ++to) {
      const double reference = from == to ? 0 : m.reference_gbs[m.index(from, to)];
      if (reference > 0 && m.bandwidth(from, to) < settings.slow_fraction * reference)
        m.slow.emplace_back(from, to);
    }
  for (int r = 0; r < p && !m.slow.empty(); ++r)
    if (std::all_of(m.slow.begin(), m.slow.end(),
                    [&](const auto& pair) { return pair.first == r || pair.second == r; }))
      m.suspect = r;
}

LinkBaseline load_link_baseline(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not JSON (" + e.what() + ")");
  }
  auto bad = [&](const std::string& why) { return std::runtime_error(path + ": " + why); };
  if (!doc.is_object() || doc.value("schema", "") != "arcoll.arbench.links/1")
    throw bad("not an arbench links --json file (schema arcoll.arbench.links/1)");
  if (!doc.contains("ranks") || !doc["ranks"].is_number_integer() || doc["ranks"] < 2)
    throw bad("ranks: missing or not a number of ranks");
  LinkBaseline b;
  b.path = path;
  b.ranks = doc["ranks"].get<int>();
  b.bandwidth_gbs.assign(static_cast<std::size_t>(b.ranks) * static_cast<std::size_t>(b.ranks), 0.0);
  if (!doc.contains("pairs") || !doc["pairs"].is_array()) throw bad("pairs: missing or not a list");
  for (const auto& pair : doc["pairs"]) {
    const bool ok = pair.is_object() && pair.contains("from") && pair["from"].is_number_integer() &&
                    pair.contains("to") && pair["to"].is_number_integer() &&
                    pair.contains("bandwidth_gbs") && pair["bandwidth_gbs"].is_number();
    if (!ok) throw bad("pairs: an entry without from, to and bandwidth_gbs");
    const int from = pair["from"], to = pair["to"];
    if (from < 0 || to < 0 || from >= b.ranks || to >= b.ranks || from == to)
      throw bad("pairs: " + std::to_string(from) + " -> " + std::to_string(to) +
                " is not a pair of " + std::to_string(b.ranks) + " ranks");
    b.bandwidth_gbs[static_cast<std::size_t>(from) * static_cast<std::size_t>(b.ranks) +
                    static_cast<std::size_t>(to)] = pair["bandwidth_gbs"].get<double>();
  }
  return b;
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
    out.append(" ").append(std::to_string(r)).append("=").append(m.hosts[static_cast<std::size_t>(r)]);
  out += "\n";
  table(
      "one-way latency, us", [&](int f, int t) { return m.latency(f, t); }, " %8.2f");
  table(
      "bandwidth, GB/s", [&](int f, int t) { return m.bandwidth(f, t); }, " %8.3f");
  std::snprintf(line, sizeof line,
                "# median latency %.2f us, median bandwidth %.3f GB/s; flagged: below %.0f%% of "
                "the reference\n",
                m.median_latency_us, m.median_bandwidth_gbs, m.slow_fraction * 100);
  out.append(line).append("# reference: ").append(m.reference).append("\n");
  for (const std::string& host : m.slow_hosts)
    out += "# slow host: " + host + " (its pairs below the pairs between the other hosts)\n";
  if (m.slow.empty()) return out + "# no slow pair\n";
  for (const auto& [from, to] : m.slow) {
    const double reference = m.reference_gbs[m.index(from, to)];
    std::snprintf(line, sizeof line,
                  "SLOW %d -> %d (%s -> %s): %.3f GB/s, %.0f%% of the reference %.3f GB/s\n",
                  from, to, m.hosts[static_cast<std::size_t>(from)].c_str(),
                  m.hosts[static_cast<std::size_t>(to)].c_str(), m.bandwidth(from, to),
                  100 * m.bandwidth(from, to) / reference, reference);
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
                         {"reference_gbs", m.reference_gbs[m.index(from, to)]},
                         {"slow", std::find(m.slow.begin(), m.slow.end(), std::pair{from, to}) !=
                                      m.slow.end()}});
  const nlohmann::json doc = {
      {"schema", "arcoll.arbench.links/1"},
      {"ranks", m.ranks},
      {"hosts", m.hosts},
      {"nic_mbps", m.nic_mbps},
      {"median_latency_us", m.median_latency_us},
      {"median_bandwidth_gbs", m.median_bandwidth_gbs},
      {"slow_fraction", m.slow_fraction},
      {"reference", m.reference},
      {"slow_hosts", m.slow_hosts},
      {"suspect_rank", m.suspect >= 0 ? nlohmann::json(m.suspect) : nlohmann::json(nullptr)},
      {"pairs", std::move(pairs)}};
  return doc.dump(2) + "\n";
}

}  // namespace arbench
