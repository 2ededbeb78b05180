#include "arcoll/tuning.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "src/reduce.hpp"

namespace arcoll {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

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

[[noreturn]] void bad_field(const std::string& path, const std::string& field,
                            const std::string& why) {
  throw ConfigurationError("tuning file", path + ": field '" + field + "' " + why);
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
  std::ifstream in(path);
  if (!in) throw ConfigurationError("tuning file", path + ": cannot be read");
  Json j;
  try {
    j = Json::parse(in);
  } catch (const Json::parse_error& e) {
    throw ConfigurationError("tuning file", path + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) bad_field(path, "(top level)", "must be an object");
  if (!j.contains("format") || j["format"] != kFormat)
    bad_field(path, "format", std::string("must be \"") + kFormat + "\"");
  if (!j.contains("version") || j["version"] != kVersion)
    bad_field(path, "version", "must be " + std::to_string(kVersion));
  Tuning tuning;
  if (j.contains("measured_on") && j["measured_on"].is_string())
    tuning.measured_on = j["measured_on"].get<std::string>();
  if (!j.contains("transports") || !j["transports"].is_object() || j["transports"].empty())
    bad_field(path, "transports", "must be an object with one entry per transport");
  for (const auto& [name, entry] : j["transports"].items()) {
    auto number = [&](const char* key) {
      const std::string field = "transports." + name + "." + key;
      if (!entry.is_object() || !entry.contains(key) || !entry[key].is_number())
        bad_field(path, field, "is missing or not a number");
      const double value = entry[key].get<double>();
      if (!(value > 0) || value > 1e12) bad_field(path, field, "must be a positive number");
      return value;
    };
    tuning.transports[name] = {number("latency_us"), number("bandwidth_gbs"), number("reduce_gbs")};
  }
  return tuning;
}

}  // namespace arcoll
