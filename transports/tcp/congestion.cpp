// Within a host there is no path to pace for: a pacing algorithm spaces a message's segments
// out at the rate it estimated from the connection's first exchanges, which varies from job to
// job. 2 ranks over loopback, send/recv of 128 KiB: 39-100 us from one job to the next under
// bbr, 28-58 under cubic. Nine collectives at 64 KiB-16 MiB (3 interleaved runs, bbr ->
// cubic): most medians 10-58% lower, a few up to 26% higher; at 64 MiB, five collectives over
// 6 runs, -10% to +6%. Across hosts the system's choice stands: the network is its business.
// A connection is switched once open, where both its ends are known: the kernel keeps the
// internal pacing bbr's start turned on (switching leaves sk_pacing_status alone), now at
// cubic's pace of 1.2-2 times the window per round trip, which over a host's round trips of
// microseconds holds little back; the figures are of such connections.
#include "transports/tcp/congestion.hpp"

#include <cerrno>
#include <cstring>

#include "arcoll/error.hpp"
#include "src/base/socket.hpp"

namespace arcoll::tcp {

std::string congestion_setting(const Options& options, bool oversubscribed) {
  // With more ranks than cores, pacing paid its way: 4 ranks on 2 cores, bbr -> cubic (6
  // interleaved runs), all-gather and all-reduce of 1 MiB 28-42% slower, all-gather of 4 MiB
  // 27%, send/recv of 4 MiB 9-12%, though all-reduce of 4 MiB 18-26% faster.
  return options.tcp_congestion == "auto" && oversubscribed ? "system" : options.tcp_congestion;
}

bool paces(const std::string& algorithm) {
  return algorithm.starts_with("bbr");
}

std::string apply_congestion_control(int fd, const std::string& setting) {
  const std::string system = net::congestion_control(fd);
  if (setting == "system") return system;
  if (setting != "auto") {
    if (setting == system || net::set_congestion_control(fd, setting)) return setting;
    const int err = errno;
    throw ConfigurationError(
        "environment",
        "ARCOLL_TCP_CONGESTION='" + setting + "': " +
            (err == ENOENT ? "the kernel has no such congestion control "
                             "(net.ipv4.tcp_available_congestion_control lists those it has)"
             : err == EPERM
                 ? "this process may not choose it (net.ipv4.tcp_allowed_congestion_control "
                   "lists those it may)"
                 : std::string(std::strerror(err))));
  }
  if (!paces(system) || !net::within_host(fd)) return system;
  for (const char* unpaced : {"cubic", "reno"})
    if (net::set_congestion_control(fd, unpaced)) return unpaced;
  return system;
}

}  // namespace arcoll::tcp
