// Calibration on first use (arcoll/tuning.hpp): measure_tuning's figures kept per host, CPU
// model and layout in a per-user cache. A user of the public API, like measure_tuning.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/host.hpp"
#include "arcoll/tuning.hpp"
#include "src/base/env.hpp"
#include "src/base/log.hpp"
#include "build_info.hpp"
#include "src/core/link_costs_source.hpp"
#include "topology/tuning_probe.hpp"

namespace arcoll {

std::string cache_folder() {
  if (auto folder = env::get("ARCOLL_CACHE_DIR")) return *folder;
  if (auto xdg = env::get("XDG_CACHE_HOME"); xdg && !xdg->empty()) return *xdg + "/arcoll";
  if (auto home = env::get("HOME"); home && !home->empty()) return *home + "/.cache/arcoll";
  return "";
}

std::string file_safe(const std::string& text) {
  std::string out;
  for (const char c : text)
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_';
  return out;
}

namespace {

// Changes with what measure_tuning's figures mean, so that figures kept before are measured
// again.
constexpr const char* kMeasurement =
    "exchanges, last-level cache, bounded rates, small messages, latency unloaded, within "
    "hosts apart";

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Each rank's host, by a hash of its name (ARCOLL_NODE_ID where set), in rank order. Collective.
std::string hosts_of_ranks(Communicator& comm) {
  const auto mine = static_cast<std::int64_t>(fnv1a(comm.node_name()));
  std::vector<std::int64_t> hosts(static_cast<std::size_t>(comm.size()));
  comm.allgather(&mine, hosts.data(), 1, DataType::i64);
  std::ostringstream text;
  for (const std::int64_t host : hosts) text << std::hex << host << ",";
  return text.str();
}

// What the figures depend on, as rank 0 sees it: the CPU, the layout and the hosts by name
// (`hosts`, hosts_of_ranks: the same layout on other hosts may be linked otherwise, as two
// emulated clusters, one of shaped links, are), the transports and the environment that
// steers them (UCX_TLS), how they are measured, and the paths their messages take (the
// library's version, commit and build flavour, the chunk size, which shared-memory messages
// are read across processes and how the rest are written into the rings).
std::string layout_key(const Communicator& comm, const std::string& cpu_model,
                       const std::string& hosts) {
  std::set<std::string> transports;
  for (int peer = 0; peer < comm.size(); ++peer)
    if (peer != comm.rank()) transports.insert(comm.transport_to(peer));
  std::ostringstream key;
  key << cpu_model << "|" << comm.size() << " ranks|" << comm.node_count() << " hosts " << hosts
      << "|";
  for (const std::string& t : transports)
    key << t << "{" << Communicator::transport_environment(t) << "},";
  const Options& options = comm.options();
  key << "|" << version() << " " << git_commit() << " " << ARCOLL_BUILD_FLAVOR
      << "|measured as " << kMeasurement
      << "|chunk " << options.chunk_bytes << "|shm single copy "
      << (options.shm_single_copy ? options.shm_single_copy_bytes : 0) << "/"
      << (options.shm_single_copy ? options.shm_single_copy_pipelined_bytes : 0)
      << "|shm ring stores " << static_cast<int>(options.shm_ring_stores);
  return key.str();
}

std::string cache_file(const Communicator& comm, const std::string& hosts) {
  const std::string folder = cache_folder();
  if (folder.empty()) return "";
  const HostInfo host = host_info();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(fnv1a(layout_key(comm, host.cpu_model, hosts))));
  return folder + "/tuning-" + file_safe(host.hostname) + "-" + std::to_string(comm.size()) +
         "r" + std::to_string(comm.node_count()) + "h-" + hash + ".json";
}

// Written beside and renamed over: jobs that start together never read half a file.
void keep(const Tuning& tuning, const std::string& file) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(file).parent_path(), error);
  const std::string partial = file + "." + std::to_string(::getpid()) + ".partial";
  try {
    save_tuning(tuning, partial);
  } catch (const ConfigurationError& e) {
    log::warn("calibration: " + std::string(e.what()) + "; the next job measures again");
    std::filesystem::remove(partial, error);
    return;
  }
  std::filesystem::rename(partial, file, error);
  if (error) log::warn("calibration: " + file + ": " + error.message());
}

// Calibrations the cache folder keeps per host: every build and layout has a file of its own,
// so a developer's folder would otherwise grow with every commit. The files least recently
// used go first. Per host, as hosts sharing a home folder would otherwise evict each other's.
constexpr std::size_t kKeptCalibrations = 32;
// A partial file this old was left by a job that died while writing it.
constexpr auto kAbandonedPartial = std::chrono::hours(1);

// Marks `file` as used now, for prune().
void touch(const std::string& file) {
  std::error_code error;
  std::filesystem::last_write_time(file, std::filesystem::file_time_type::clock::now(), error);
}

// The names cache_file gives `host`'s calibrations, tuning-<host>-<ranks>r<hosts>h-<hash>.json
// (another host's name may begin with this one's).
std::regex calibrations_of(const std::string& host) {
  std::string pattern = "tuning-";
  for (const char c : host) {  // file_safe: letters, digits, '.', '-', '_'
    if (c == '.') pattern += '\\';
    pattern += c;
  }
  return std::regex(pattern + R"(-\d+r\d+h-[0-9a-f]{16}\.json)");
}

// Removes all but the kKeptCalibrations calibrations of `host` in `folder` last used, and
// partial files abandoned there. Best effort: a file another job removes first is skipped.
void prune(const std::string& folder, const std::string& host) {
  namespace fs = std::filesystem;
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  const std::regex ours = calibrations_of(host);
  std::error_code error;
  fs::directory_iterator entries(folder, error);
  const auto now = fs::file_time_type::clock::now();
  for (; !error && entries != fs::directory_iterator(); entries.increment(error)) {
    const std::string name = entries->path().filename().string();
    std::error_code gone;
    const fs::file_time_type used = entries->last_write_time(gone);
    if (gone) continue;
    if (std::regex_match(name, ours))
      files.emplace_back(used, entries->path());
    else if (name.rfind("tuning-", 0) == 0 && entries->path().extension() == ".partial" &&
             now - used > kAbandonedPartial)
      fs::remove(entries->path(), gone);
  }
  if (error) log::warn("calibration: " + folder + ": " + error.message() + "; nothing removed");
  if (error || files.size() <= kKeptCalibrations) return;
  std::sort(files.begin(), files.end(), std::greater<>());
  for (std::size_t i = kKeptCalibrations; i < files.size(); ++i) fs::remove(files[i].second, error);
}

// Kept figures whose in-cache exchanges within a host are this many times slower than a look
// at the links now finds were measured while the host ran slow (a virtual machine's host can
// slow its exchanges several times over for seconds): they are measured again.
constexpr double kSlowCalibration = 3;
// The same for the latency, whose looks vary more (4 ranks on 2 cores: 1.8-19 us against
// 5.2 kept): two ranks of a job that has just begun can share a core for tens of milliseconds
// (2 jobs of 12 on 2 cores here), their exchanges of 8 bytes taking 1.1-1.6 ms instead of
// 0.7 us; kept, such a latency (and its 0.25 GB/s for 4) made torch's all-reduce of 4 MiB
// take twice as long.
constexpr double kSlowLatency = 10;

// Why the kept figures no longer hold, or "" when they do. Collective.
std::string outdated(Communicator& comm, const Tuning& kept) {
  const WithinHostCosts now = within_host_costs_now(comm);
  const auto it = kept.transports.find(now.transport);
  if (now.transport.empty() || it == kept.transports.end()) return "";
  const TransportCosts& figures = it->second;
  char text[200];
  if (comm.rank() == 0) {
    std::snprintf(text, sizeof text,
                  "calibration: %s now %.2f us, %.1f GB/s in cache; kept %.2f us, %.1f GB/s",
                  now.transport.c_str(), now.latency_us, now.cached_gbs, figures.latency_us,
                  figures.cached_bandwidth_gbs);
    log::debug(text);
  }
  if (now.latency_us > 0 && figures.latency_us > kSlowLatency * now.latency_us) {
    std::snprintf(text, sizeof text,
                  "%s exchanges of 8 bytes took %.1f us, the kept figures say %.1f",
                  now.transport.c_str(), now.latency_us, figures.latency_us);
    return text;
  }
  if (figures.cached_bandwidth_gbs > 0 &&
      now.cached_gbs >= kSlowCalibration * figures.cached_bandwidth_gbs) {
    std::snprintf(text, sizeof text,
                  "%s exchanges in cache ran at %.1f GB/s, the kept figures say %.1f",
                  now.transport.c_str(), now.cached_gbs, figures.cached_bandwidth_gbs);
    return text;
  }
  return "";
}

void broadcast_text(Communicator& comm, std::string& text) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  comm.broadcast(&length, 1, DataType::i64, 0);
  text.resize(static_cast<std::size_t>(length));
  comm.broadcast(text.data(), text.size(), DataType::u8, 0);
}

}  // namespace

Calibration calibration_from_env() {
  const auto value = env::get("ARCOLL_CALIBRATE");
  if (!value || *value == "cache") return Calibration::cache;
  if (*value == "now") return Calibration::now;
  if (*value == "off") return Calibration::off;
  throw ConfigurationError("ARCOLL_CALIBRATE",
                           "'" + *value + "' is not cache, now or off");
}

CalibratedTuning calibrated_tuning(Communicator& comm, Calibration mode) {
  if (mode == Calibration::off) return {{}, "built-in link costs (ARCOLL_CALIBRATE=off)"};
  if (comm.size() == 1) return {{}, "built-in link costs (one rank: no link to measure)"};
  // Rank 0 decides for all: its cache file and what it holds, or nothing (measure).
  const std::string hosts = hosts_of_ranks(comm);
  std::string file, kept;
  if (comm.rank() == 0) {
    file = cache_file(comm, hosts);
    if (mode == Calibration::cache && !file.empty() && std::filesystem::exists(file)) {
      try {
        kept = tuning_json(load_tuning(file));
        touch(file);  // in use: prune() keeps it
      } catch (const ConfigurationError& e) {
        log::warn("calibration: " + std::string(e.what()) + "; measuring again");
      }
    }
  }
  broadcast_text(comm, file);
  broadcast_text(comm, kept);
  std::string outdated_by;  // why kept figures are measured again
  if (!kept.empty()) {
    Tuning tuning = parse_tuning(kept, file);
    outdated_by = outdated(comm, tuning);
    if (outdated_by.empty())
      return {tuning, "link costs kept in " + file + " (" + tuning.measured_on + ")"};
    if (comm.rank() == 0) log::warn("calibration: measuring again: " + outdated_by);
  }
  Tuning tuning = measure_tuning(comm);
  // A slow moment during the measurement (ranks that began on one core) leaves figures that a
  // look right after contradicts: one more measurement, which is kept; were it slow too, the
  // next job's look measures again.
  if (const std::string contradicted = outdated(comm, tuning); !contradicted.empty()) {
    if (comm.rank() == 0) log::debug("calibration: measuring again: " + contradicted);
    tuning = measure_tuning(comm);
  }
  if (file.empty())
    return {tuning, "link costs measured just now (no cache folder: set ARCOLL_CACHE_DIR or HOME)"};
  if (comm.rank() == 0) {
    keep(tuning, file);
    prune(std::filesystem::path(file).parent_path().string(), file_safe(host_info().hostname));
  }
  if (!outdated_by.empty())
    return {tuning, "link costs measured again, kept in " + file + " (" + outdated_by + ")"};
  return {tuning, "link costs measured just now, kept in " + file};
}

std::string use_calibrated_link_costs(Communicator& comm, Calibration mode) {
  if (!comm.options().tuning_file.empty())
    return "link costs from " + comm.options().tuning_file + " (ARCOLL_TUNING_FILE)";
  CalibratedTuning calibrated = calibrated_tuning(comm, mode);
  if (!calibrated.tuning.transports.empty()) comm.set_tuning(calibrated.tuning);
  return calibrated.source;
}

namespace {
const Registrar<LinkCostsSource> kCalibration{
    {"calibration",
     [](Communicator& comm) { return use_calibrated_link_costs(comm, calibration_from_env()); }}};
}  // namespace

}  // namespace arcoll
