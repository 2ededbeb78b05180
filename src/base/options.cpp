#include "arcoll/options.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "arcoll/error.hpp"
#include "src/base/env.hpp"

namespace arcoll {

namespace env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long long> get_int(const char* name) {
  auto text = get(name);
  if (!text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text->c_str(), &end, 10);
  if (errno != 0 || end == text->c_str() || *end != '\0')
    throw ConfigurationError("environment",
                             std::string(name) + "='" + *text + "' is not an integer");
  return value;
}

std::string with_prefixes(const std::vector<std::string>& prefixes) {
  std::vector<std::string> found;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view variable(*entry);
    for (const std::string& prefix : prefixes)
      if (variable.rfind(prefix, 0) == 0) {
        found.emplace_back(variable);
        break;
      }
  }
  std::sort(found.begin(), found.end());
  std::string text;
  for (const std::string& variable : found) text += variable + "\n";
  return text;
}

}  // namespace env

std::optional<std::chrono::milliseconds> parse_timeout(std::string_view seconds) {
  const std::string text(seconds);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || !(value > 0) ||
      !(value * 1000.0 <= static_cast<double>(kMaxTimeout.count())))
    return std::nullopt;
  // Rounded up: a fraction of a millisecond is not a zero timeout.
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(value * 1000.0)));
}

std::string timeout_problem(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) return "the timeout must be positive";
  if (timeout > kMaxTimeout) return "the timeout must be at most a week (604800 s)";
  return {};
}

std::string tcp_congestion_problem(const std::string& setting) {
  // TCP_CA_NAME_MAX is 16 with the terminating zero: longer names would be cut short.
  const bool named = !setting.empty() && setting.size() <= 15 &&
                     std::all_of(setting.begin(), setting.end(), [](char c) {
                       return std::islower(static_cast<unsigned char>(c)) ||
                              std::isdigit(static_cast<unsigned char>(c)) || c == '_';
                     });
  if (named) return {};
  return "the TCP congestion control '" + setting +
         "' must be auto, system or the name of a kernel algorithm (cubic, reno, bbr...)";
}

std::optional<std::size_t> parse_byte_size(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 19) return std::nullopt;
  unsigned long long value =
      std::strtoull(std::string(text.substr(0, digits)).c_str(), nullptr, 10);
  std::string suffix(text.substr(digits));
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.ends_with("IB"))
    suffix.resize(suffix.size() - 2);
  else if (suffix.size() > 1 && suffix.ends_with("B"))
    suffix.resize(suffix.size() - 1);
  else if (suffix == "B")
    suffix.clear();
  unsigned shift = 0;
  if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else if (!suffix.empty())
    return std::nullopt;
  if (value > (std::numeric_limits<std::size_t>::max() >> shift)) return std::nullopt;
  return static_cast<std::size_t>(value << shift);
}

namespace {

// A 0/1 switch from the environment; nullopt when unset.
std::optional<bool> env_switch(const char* name) {
  auto v = env::get(name);
  if (!v) return std::nullopt;
  if (*v != "0" && *v != "1")
    throw ConfigurationError("environment", std::string(name) + "='" + *v + "' must be 0 or 1");
  return *v == "1";
}

// A size from the environment ("64K", "1M"); nullopt when unset. `least`: the smallest allowed.
std::optional<std::size_t> env_byte_size(const char* name, const char* example,
                                         std::size_t least = 0) {
  auto v = env::get(name);
  if (!v) return std::nullopt;
  auto bytes = parse_byte_size(*v);
  if (!bytes || *bytes < least)
    throw ConfigurationError("environment",
                             std::string(name) + "='" + *v + "' is not a size like " + example);
  return bytes;
}

}  // namespace

Options Options::from_env() {
  Options options;
  if (auto text = env::get("ARCOLL_TIMEOUT")) {
    const auto timeout = parse_timeout(*text);
    if (!timeout)
      throw ConfigurationError("environment", "ARCOLL_TIMEOUT='" + *text +
                                                  "' must be a positive number of seconds, at "
                                                  "most 604800 (a week)");
    options.timeout = *timeout;
  }
  if (auto v = env::get("ARCOLL_ALGO")) options.algorithm = *v;
  if (auto v = env::get("ARCOLL_TRANSPORT")) options.transport = *v;
  if (auto v = env::get("ARCOLL_SOCKET_IFNAME")) options.socket_ifname = *v;
  if (auto v = env::get_int("ARCOLL_SOCKETS_PER_PEER")) {
    if (*v < 1 || *v > 64)
      throw ConfigurationError("environment", "ARCOLL_SOCKETS_PER_PEER must be within 1..64");
    options.sockets_per_peer = static_cast<int>(*v);
  }
  if (auto v = env::get("ARCOLL_TCP_CONGESTION")) {
    if (std::string why = tcp_congestion_problem(*v); !why.empty())
      throw ConfigurationError("environment", "ARCOLL_TCP_CONGESTION: " + why);
    options.tcp_congestion = *v;
  }
  if (auto v = env::get_int("ARCOLL_BUSY_POLL_US"))
    options.busy_poll = std::chrono::microseconds(*v);
  if (auto v = env_switch("ARCOLL_SHM_SINGLE_COPY")) options.shm_single_copy = *v;
  if (auto bytes = env_byte_size("ARCOLL_SHM_SINGLE_COPY_BYTES", "64K or 1M"))
    options.shm_single_copy_bytes = *bytes;
  if (auto bytes = env_byte_size("ARCOLL_SHM_SINGLE_COPY_PIPELINED_BYTES", "64K or 1M"))
    options.shm_single_copy_pipelined_bytes = *bytes;
  if (auto v = env::get("ARCOLL_SHM_RING_STORES")) {
    if (*v == "auto")
      options.shm_ring_stores = ShmRingStores::automatic;
    else if (*v == "cached")
      options.shm_ring_stores = ShmRingStores::cached;
    else if (*v == "streaming")
      options.shm_ring_stores = ShmRingStores::streaming;
    else
      throw ConfigurationError("environment", "ARCOLL_SHM_RING_STORES='" + *v +
                                                  "' must be auto, cached or streaming");
  }
  if (auto bytes = env_byte_size("ARCOLL_STREAMING_BYTES", "4K or 16M"))
    options.streaming_bytes = *bytes;
  if (auto v = env::get("ARCOLL_COPY_STREAMING_BYTES"); v && *v != "auto")
    options.copy_streaming_bytes = env_byte_size("ARCOLL_COPY_STREAMING_BYTES", "auto or 64M");
  if (auto bytes = env_byte_size("ARCOLL_DEVICE_PIPELINE_BYTES", "0 or 4M"))
    options.device_pipeline_bytes = *bytes;
  if (auto bytes = env_byte_size("ARCOLL_CHUNK_BYTES", "512K or 1M", 1))
    options.chunk_bytes = *bytes;
  if (auto v = env::get_int("ARCOLL_CHANNELS")) {
    if (*v < 1 || *v > 64)
      throw ConfigurationError("environment", "ARCOLL_CHANNELS must be within 1..64");
    options.channels = static_cast<int>(*v);
  }
  if (auto v = env::get("ARCOLL_WIRE")) {
    auto type = parse_data_type(*v);
    if (!type || (*type != DataType::f32 && *type != DataType::f16 && *type != DataType::bf16))
      throw ConfigurationError("environment", "ARCOLL_WIRE='" + *v + "' must be f32, f16 or bf16");
    options.wire = *type;
  }
  if (auto v = env_switch("ARCOLL_WIRE_ERROR_FEEDBACK")) options.wire_error_feedback = *v;
  if (auto v = env_switch("ARCOLL_CHECKSUM")) options.checksum = *v;
  if (auto v = env::get("ARCOLL_TUNING_FILE")) options.tuning_file = *v;
  return options;
}

}  // namespace arcoll
