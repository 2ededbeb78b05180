#include "arcoll/tuning.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "arcoll/error.hpp"
#include "src/base/json_file.hpp"
#include "transports/transport.hpp"

namespace arcoll {
namespace {

using Json = json_file::Json;

constexpr const char* kFileFormat = "arcoll-tuning";
constexpr int kFileVersion = 1;

}  // namespace

std::string within_hosts_key(const std::string& transport) {
  return transport + " within hosts";
}

Tuning default_tuning() {
  Tuning t;
  t.measured_on = "built-in defaults";
  for (const TransportInfo* info : TransportRegistry::instance().all())
    t.transports[info->name] = info->default_costs;
  return t;
}

std::string tuning_json(const Tuning& tuning) {
  Json j;
  j["format"] = kFileFormat;
  j["version"] = kFileVersion;
  j["measured_on"] = tuning.measured_on;
  if (tuning.last_level_cache_bytes > 0)
    j["last_level_cache_bytes"] = tuning.last_level_cache_bytes;
  for (const auto& [name, c] : tuning.transports) {
    Json& entry = j["transports"][name];
    entry = {{"latency_us", c.latency_us},
             {"bandwidth_gbs", c.bandwidth_gbs},
             {"reduce_gbs", c.reduce_gbs}};
    if (c.cached_bandwidth_gbs > 0) entry["cached_bandwidth_gbs"] = c.cached_bandwidth_gbs;
    if (c.cached_reduce_gbs > 0) entry["cached_reduce_gbs"] = c.cached_reduce_gbs;
    if (c.small_bandwidth_gbs > 0) entry["small_bandwidth_gbs"] = c.small_bandwidth_gbs;
  }
  return j.dump(2) + "\n";
}

Tuning parse_tuning(const std::string& text, const std::string& name) {
  const json_file::Source source{"tuning file", name};
  const Json j = json_file::parse_object(text, source);
  if (!j.contains("format") || j["format"] != kFileFormat)
    json_file::bad(source, "format", std::string("must be \"") + kFileFormat + "\"");
  if (!j.contains("version") || j["version"] != kFileVersion)
    json_file::bad(source, "version", "must be " + std::to_string(kFileVersion));
  Tuning tuning;
  if (j.contains("measured_on") && j["measured_on"].is_string())
    tuning.measured_on = j["measured_on"].get<std::string>();
  // Optional: files of earlier versions have none.
  if (j.contains("last_level_cache_bytes"))
    tuning.last_level_cache_bytes = json_file::positive(j, source, "", "last_level_cache_bytes");
  if (!j.contains("transports") || !j["transports"].is_object() || j["transports"].empty())
    json_file::bad(source, "transports", "must be an object with one entry per transport");
  for (const auto& [transport, entry] : j["transports"].items()) {
    const std::string at = "transports." + transport;
    // The cached and small figures are optional (files of earlier versions have none).
    auto optional = [&](const char* key) {
      return entry.contains(key) ? json_file::positive(entry, source, at, key) : 0.0;
    };
    tuning.transports[transport.data()] = {
        json_file::positive(entry, source, at, "latency_us"),
        json_file::positive(entry, source, at, "bandwidth_gbs"),
        json_file::positive(entry, source, at, "reduce_gbs"), optional("cached_bandwidth_gbs"),
        optional("cached_reduce_gbs"), optional("small_bandwidth_gbs")};
  }
  return tuning;
}

void save_tuning(const Tuning& tuning, const std::string& path) {
  std::ofstream out(path);
  out << tuning_json(tuning);
  if (!out) throw ConfigurationError("tuning file", path + ": cannot be written");
}

Tuning load_tuning(const std::string& path) {
  return parse_tuning(json_file::read({"tuning file", path}), path);
}

}  // namespace arcoll
