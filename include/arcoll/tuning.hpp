// Link costs for the cost model that picks algorithms under "auto": per transport, the time
// of a small message, the bandwidth of a large one and the rate of reduction, measured
// between the ranks at hand (`arbench tune`) and kept in a JSON tuning file
// (Options::tuning_file, ARCOLL_TUNING_FILE).
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "arcoll/transport_costs.hpp"

namespace arcoll {

class Communicator;

struct Tuning {
  std::map<std::string, TransportCosts> transports;  // by transport name
  std::string measured_on;  // what the figures were measured on (hosts, ranks, date)
};

// Built-in figures of every transport of this build, from their registration (each says what
// it was measured on): a real network is slower than the loopback they were measured over, so
// tune on it.
Tuning default_tuning();

// Measures the transports this communicator uses as a ring step loads them: the ranks at
// once, latency from ping-pongs and bandwidth from exchanges both ways at once; within hosts
// in pairs, across hosts one pair per host while the host's other ranks keep its cores busy;
// and the reduction rate, every rank reducing. The means over the measuring pairs. With more
// ranks than cores the costs are those of this job's layout: tune with the ranks and hosts
// the job will run. Collective: every rank calls it; all return the same figures.
Tuning measure_tuning(Communicator& comm);

// JSON files. load_tuning throws ConfigurationError naming the file and the field at fault.
void save_tuning(const Tuning& tuning, const std::string& path);
Tuning load_tuning(const std::string& path);

}  // namespace arcoll
