// Link costs for the cost model that picks algorithms under "auto": per transport, the time
// of a small message, the bandwidth of a large one and the rate of reduction, measured
// between the ranks at hand (`arbench tune`) and kept in a JSON tuning file
// (Options::tuning_file, ARCOLL_TUNING_FILE).
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace arcoll {

class Communicator;

struct TransportCosts {
  double latency_us = 0;     // one small message, one way (α)
  double bandwidth_gbs = 0;  // GB/s each way of a large exchange (1/β)
  double reduce_gbs = 0;     // GB/s of reduction, f32 sum out of cache (1/γ)
};

struct Tuning {
  std::map<std::string, TransportCosts> transports;  // by transport name: "shm", "tcp"
  std::string measured_on;  // what the figures were measured on (hosts, ranks, date)
};

// Built-in figures, measured with `arbench tune --np 2` on a 2-core x86-64 host (shm) and over
// its loopback between two emulated hosts (tcp): a real network is slower, so tune on it.
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
