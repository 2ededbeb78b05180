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
  // By transport name; a transport that carries pairs both within hosts and across them (one
  // forced with ARCOLL_TRANSPORT between hosts) has its figures within hosts under
  // within_hosts_key(name) too.
  std::map<std::string, TransportCosts> transports;
  std::string measured_on;  // what the figures were measured on (hosts, ranks, date)
  // The smallest last-level cache of the hosts measured, in bytes (0: unknown): up to which
  // buffer sizes the figures measured in cache hold.
  double last_level_cache_bytes = 0;
};

// The key of a transport's figures within hosts where it also crosses them: its pairs within a
// host may be far faster (UCX's shared memory, loopback) than its link across.
std::string within_hosts_key(const std::string& transport);

// Built-in figures of every transport of this build, from their registration (each says what
// it was measured on): a real network is slower than the loopback they were measured over, so
// tune on it.
Tuning default_tuning();

// Measures the transports this communicator uses as a ring step loads them: the ranks at
// once, latency and bandwidth from exchanges both ways at once; within hosts in pairs,
// across hosts one pair per host while the host's other ranks keep its cores busy; and the
// reduction rate, every rank reducing. The means over the measuring pairs. With more
// ranks than cores the costs are those of this job's layout: tune with the ranks and hosts
// the job will run. Collective: every rank calls it; all return the same figures.
Tuning measure_tuning(Communicator& comm);

// JSON files. load_tuning throws ConfigurationError naming the file and the field at fault.
void save_tuning(const Tuning& tuning, const std::string& path);
Tuning load_tuning(const std::string& path);
// The same as text; `name` says where the text came from in errors.
std::string tuning_json(const Tuning& tuning);
Tuning parse_tuning(const std::string& text, const std::string& name);

// Calibration on first use: the figures measure_tuning finds for a layout (ranks, hosts, the
// transports between them) on a host and CPU model are kept in a per-user cache, and later
// jobs of that layout there reuse them, so a host pays the measurement (under a second) once.
// Each reuse first looks at the links within hosts for a few milliseconds (where two ranks
// share a host): figures whose in-cache rate is three times slower than what it finds, or
// whose latency is ten times, were measured while the host ran slow, and are measured again;
// so is a measurement that a look right after contradicts.
// ARCOLL_CALIBRATE chooses: "cache" (the default: the kept figures, or measure and keep),
// "now" (measure again and keep: after a hardware or driver change), "off" (the built-in
// figures). ARCOLL_CACHE_DIR is the folder (default $XDG_CACHE_HOME/arcoll, else
// ~/.cache/arcoll); it keeps each host's 32 calibrations last used.
enum class Calibration { cache, now, off };
// The per-user cache folder: ARCOLL_CACHE_DIR, else $XDG_CACHE_HOME/arcoll, else
// ~/.cache/arcoll; empty when none is set. It may not exist yet.
std::string cache_folder();
// `text` fit for a file name in that folder: letters, digits, '.' and '-' kept, anything else
// made '_'.
std::string file_safe(const std::string& text);
// ARCOLL_CALIBRATE; ConfigurationError for another value.
Calibration calibration_from_env();
struct CalibratedTuning {
  Tuning tuning;       // empty with Calibration::off and for a world of one
  std::string source;  // where the figures come from, for a report's header
};
// Collective: rank 0 looks in its cache (the key: its host name, CPU model, the ranks and
// hosts of the job and each rank's host by name, the transports rank 0 uses and the
// environment steering them (UCX_TLS), the library's version, commit and build, the chunk
// size and shared-memory threshold) and every rank returns the same figures. A cache that
// cannot be written costs a warning, not the job.
CalibratedTuning calibrated_tuning(Communicator& comm, Calibration mode);
// Gives `comm` the figures of calibrated_tuning(comm, mode), unless its Options name a tuning
// file, which it uses then. Collective; says where the figures came from.
// Communicator::from_env, the C API and the torch backend call it for their users with
// calibration_from_env().
std::string use_calibrated_link_costs(Communicator& comm, Calibration mode);

}  // namespace arcoll
