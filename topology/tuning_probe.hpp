// A quick look at the links, to check figures kept from an earlier calibration (calibration.cpp)
// against the host as it runs now. Measured as measure_tuning measures (measure_tuning.cpp).
#pragma once

#include <string>

#include "arcoll/communicator.hpp"

namespace arcoll {

struct WithinHostCosts {
  // Between ranks of one host; empty where no two ranks share one, or where it also crosses
  // hosts (its kept figures are then those across).
  std::string transport;
  double latency_us = 0;  // as Tuning's latency_us of that transport
  double cached_gbs = 0;  // as its cached_bandwidth_gbs
};

// The latency and in-cache exchange rate between ranks of one host, in pairs at once, from a
// few milliseconds of exchanges. Collective: every rank calls it and gets the same result.
WithinHostCosts within_host_costs_now(Communicator& comm);

}  // namespace arcoll
