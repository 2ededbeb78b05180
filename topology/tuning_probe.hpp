// A quick look at the links, to check figures kept from an earlier calibration (calibration.cpp)
// against the host as it runs now. Measured as measure_tuning measures (measure_tuning.cpp).
#pragma once

#include <string>

#include "arcoll/communicator.hpp"

namespace arcoll {

struct WithinHostCosts {
  // The key of Tuning::transports for pairs within a host: the transport between ranks of one
  // host, or within_hosts_key() of it where it also crosses hosts; empty where no two ranks
  // share a host.
  std::string transport;
  double latency_us = 0;  // as Tuning's latency_us of that transport
  double cached_gbs = 0;  // as its cached_bandwidth_gbs
};

// The latency and in-cache exchange rate between ranks of one host, in pairs at once, from a
// few milliseconds of exchanges. Collective: every rank calls it and gets the same result.
WithinHostCosts within_host_costs_now(Communicator& comm);

}  // namespace arcoll
