// Facts about the host a process runs on, recorded with every benchmark result so that numbers
// from different machines can be told apart.
#pragma once

#include <cstdint>
#include <string>

namespace arcoll {

struct HostInfo {
  std::string hostname;   // gethostname()
  std::string cpu_model;  // "model name" (or the architecture's equivalent) in /proc/cpuinfo
  std::string kernel;     // uname release, e.g. "6.1.0-18-amd64"
  std::string os;         // PRETTY_NAME from /etc/os-release, e.g. "Debian GNU/Linux 12 (bookworm)"
  int cores = 0;          // online logical CPUs
  std::uint64_t memory_bytes = 0;  // physical memory (MemTotal)
  std::string tcp_congestion;      // the kernel's default for TCP (net.ipv4.tcp_congestion_control)
};

// Reads /proc/cpuinfo, sysconf, uname, /proc/meminfo, /etc/os-release and /proc/sys. Whatever
// cannot be read is "unknown" (strings) or 0 (numbers); never throws for a missing or odd file.
HostInfo host_info();

}  // namespace arcoll
