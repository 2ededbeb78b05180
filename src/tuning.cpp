#include "arcoll/tuning.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "src/json_file.hpp"
#include "src/reduce.hpp"

namespace arcoll {
namespace {

using Clock = std::chrono::steady_clock;
using Json = json_file::Json;

constexpr const char* kFormat = "arcoll-tuning";
constexpr int kVersion = 1;

constexpr std::size_t kSmallBytes = 8;
constexpr int kSmallRounds = 200;
constexpr std::size_t kLargeBytes = 4 << 20;
constexpr int kLargeRounds = 8;
constexpr int kTag = 7001;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Mean one-way time of `rounds` round trips of `bytes` between rank 0 and `peer`.
double one_way_seconds(Communicator& comm, int peer, std::size_t bytes, int rounds) {
  std::vector<char> buffer(bytes);
  const bool first = comm.rank() == 0;
  auto round_trip = [&] {
    if (first) {
      comm.send(buffer.data(), bytes, peer, kTag);
      comm.recv(buffer.data(), bytes, peer, kTag);
    } else {
      comm.recv(buffer.data(), bytes, 0, kTag);
      comm.send(buffer.data(), bytes, 0, kTag);
    }
  };
  for (int i = 0; i < std::max(2, rounds / 10); ++i) round_trip();  // warm-up
  const auto start = Clock::now();
  for (int i = 0; i < rounds; ++i) round_trip();
  return seconds_since(start) / rounds / 2;
}

// GB/s of an f32 sum over buffers larger than the caches, the best of a few runs.
double reduce_gbs() {
  const std::size_t count = (32u << 20) / sizeof(float);
  std::vector<float> a(count, 1.0f), b(count, 2.0f);
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    const auto start = Clock::now();
    kernels::reduce(a.data(), a.data(), b.data(), count, DataType::f32, ReduceOp::sum);
    best = std::min(best, seconds_since(start));
  }
  return static_cast<double>(count * sizeof(float)) / best / 1e9;
}

std::string today() {
  char text[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(text, sizeof text, "%Y-%m-%d", std::gmtime(&now));
  return text;
}


}  // namespace

Tuning default_tuning() {
  Tuning t;
  t.measured_on = "built-in defaults";
  t.transports["shm"] = {2.1, 4.5, 6.0};
  t.transports["tcp"] = {13.0, 3.3, 6.0};
  return t;
}

Tuning measure_tuning(Communicator& comm) {
  // Rank 0 picks the first rank it reaches over each of its transports; the others learn
  // whether they are picked.
  std::vector<std::int32_t> picked(static_cast<std::size_t>(comm.size()), 0);
  if (comm.rank() == 0) {
    std::vector<std::string> seen;
    for (int r = 1; r < comm.size(); ++r) {
      const std::string t = comm.transport_to(r);
      if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
      seen.push_back(t);
      picked[static_cast<std::size_t>(r)] = 1;
    }
  }
  comm.broadcast(picked.data(), picked.size(), DataType::i32, 0);

  Tuning tuning;
  const double gamma_gbs = comm.rank() == 0 ? reduce_gbs() : 0;
  for (int r = 1; r < comm.size(); ++r) {
    if (picked[static_cast<std::size_t>(r)] == 0) continue;
    comm.barrier();
    if (comm.rank() != 0 && comm.rank() != r) continue;
    const double alpha = one_way_seconds(comm, r, kSmallBytes, kSmallRounds);
    const double large = one_way_seconds(comm, r, kLargeBytes, kLargeRounds);
    const double bandwidth = static_cast<double>(kLargeBytes) / std::max(large - alpha, 1e-9) / 1e9;
    if (comm.rank() == 0) tuning.transports[comm.transport_to(r)] = {alpha * 1e6, bandwidth, gamma_gbs};
  }
  // Everyone returns rank 0's figures.
  std::vector<double> figures;
  std::string names;
  for (const auto& [name, c] : tuning.transports) {
    names += name + "\n";
    figures.insert(figures.end(), {c.latency_us, c.bandwidth_gbs, c.reduce_gbs});
  }
  std::int64_t lengths[2] = {static_cast<std::int64_t>(names.size()),
                             static_cast<std::int64_t>(figures.size())};
  comm.broadcast(lengths, 2, DataType::i64, 0);
  names.resize(static_cast<std::size_t>(lengths[0]));
  figures.resize(static_cast<std::size_t>(lengths[1]));
  comm.broadcast(names.data(), names.size(), DataType::u8, 0);
  comm.broadcast(figures.data(), figures.size(), DataType::f64, 0);
  tuning.transports.clear();
  std::size_t at = 0, begin = 0;
  for (std::size_t end = names.find('\n'); end != std::string::npos;
       begin = end + 1, end = names.find('\n', begin), at += 3)
    tuning.transports[names.substr(begin, end - begin)] = {figures[at], figures[at + 1],
                                                           figures[at + 2]};
  tuning.measured_on = std::to_string(comm.size()) + " ranks on " +
                       std::to_string(comm.node_count()) + " host(s), rank 0 on " +
                       comm.node_name() + ", " + today();
  return tuning;
}

void save_tuning(const Tuning& tuning, const std::string& path) {
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["measured_on"] = tuning.measured_on;
  for (const auto& [name, c] : tuning.transports)
    j["transports"][name] = {{"latency_us", c.latency_us},
                             {"bandwidth_gbs", c.bandwidth_gbs},
                             {"reduce_gbs", c.reduce_gbs}};
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw ConfigurationError("tuning file", path + ": cannot be written");
}

Tuning load_tuning(const std::string& path) {
  const json_file::Source source{"tuning file", path};
  const Json j = json_file::parse_object(json_file::read(source), source);
  if (!j.contains("format") || j["format"] != kFormat)
    json_file::bad(source, "format", std::string("must be \"") + kFormat + "\"");
  if (!j.contains("version") || j["version"] != kVersion)
    json_file::bad(source, "version", "must be " + std::to_string(kVersion));
  Tuning tuning;
  if (j.contains("measured_on") && j["measured_on"].is_string())
    tuning.measured_on = j["measured_on"].get<std::string>();
  if (!j.contains("transports") || !j["transports"].is_object() || j["transports"].empty())
    json_file::bad(source, "transports", "must be an object with one entry per transport");
  for (const auto& [name, entry] : j["transports"].items()) {
    const std::string at = "transports." + name;
    tuning.transports[name] = {json_file::positive(entry, source, at, "latency_us"),
                               json_file::positive(entry, source, at, "bandwidth_gbs"),
                               json_file::positive(entry, source, at, "reduce_gbs")};
  }
  return tuning;
}

}  // namespace arcoll
