#include "arcoll/host.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <string_view>

namespace arcoll {
namespace {

constexpr const char* kUnknown = "unknown";

std::string trim(std::string_view text) {
  auto is_space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return std::string(text);
}

// Value of the first "key<sep>value" line of `path` whose key is `key`; empty when absent.
std::string find_key(const char* path, std::string_view key, char separator) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto pos = line.find(separator);
    if (pos == std::string::npos) continue;
    if (trim(std::string_view(line).substr(0, pos)) != key) continue;
    return trim(std::string_view(line).substr(pos + 1));
  }
  return {};
}

std::string hostname() {
  char buffer[256] = {};
  if (::gethostname(buffer, sizeof buffer - 1) != 0 || buffer[0] == '\0') return kUnknown;
  return buffer;
}

std::string cpu_model() {
  // x86: "model name"; POWER: "cpu"; some ARM and RISC-V kernels: "Model", "Hardware", "uarch".
  for (const char* key : {"model name", "Model", "Hardware", "cpu", "uarch"}) {
    std::string value = find_key("/proc/cpuinfo", key, ':');
    if (!value.empty()) return value;
  }
  return kUnknown;
}

std::string kernel_release() {
  struct utsname names {};
  if (::uname(&names) != 0 || names.release[0] == '\0') return kUnknown;
  return names.release;
}

std::string os_name() {
  std::string value = find_key("/etc/os-release", "PRETTY_NAME", '=');
  if (value.empty()) value = find_key("/usr/lib/os-release", "PRETTY_NAME", '=');
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') &&
      value.back() == value.front())
    value = value.substr(1, value.size() - 2);
  return value.empty() ? kUnknown : value;
}

int online_cores() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 0;
}

std::uint64_t memory_bytes() {
  // "MemTotal:       24576000 kB"
  const std::string value = find_key("/proc/meminfo", "MemTotal", ':');
  if (!value.empty() && std::isdigit(static_cast<unsigned char>(value.front()))) {
    const unsigned long long kib = std::strtoull(value.c_str(), nullptr, 10);
    if (kib > 0) return static_cast<std::uint64_t>(kib) * 1024;
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0)
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  return 0;
}

std::string tcp_congestion() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string line;
  std::getline(in, line);
  line = trim(line);
  return line.empty() ? kUnknown : line;
}

}  // namespace

HostInfo host_info() {
  HostInfo info;
  info.hostname = hostname();
  info.cpu_model = cpu_model();
  info.kernel = kernel_release();
  info.os = os_name();
  info.cores = online_cores();
  info.memory_bytes = memory_bytes();
  info.tcp_congestion = tcp_congestion();
  return info;
}

}  // namespace arcoll
