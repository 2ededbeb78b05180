// The congestion control of the TCP transport's connections (Options::tcp_congestion).
#pragma once

#include <string>

#include "arcoll/options.hpp"

namespace arcoll::tcp {

// Whether an algorithm paces a connection's segments out at its own estimate of the path's
// rate (bbr, in each of its versions), rather than sending what its window allows at once.
bool paces(const std::string& algorithm);

// What the connections of a job whose host has `oversubscribed` cores run by:
// Options::tcp_congestion, but the system's where auto meets more ranks than cores.
std::string congestion_setting(const Options& options, bool oversubscribed);

// Applies `setting` (auto, system, or an algorithm's name) to the connected socket `fd` and
// returns the algorithm it runs. A named algorithm that the kernel lacks or refuses this
// process is a ConfigurationError naming ARCOLL_TCP_CONGESTION.
std::string apply_congestion_control(int fd, const std::string& setting);

}  // namespace arcoll::tcp
