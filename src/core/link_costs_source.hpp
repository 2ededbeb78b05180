// Where a communicator made from the environment (Communicator::from_env, the C API's
// arcoll_comm_init*) takes its link costs from. The calibration kept per host
// (topology/calibration.cpp) measures through the public API, above the core: it registers
// itself here, and the core reaches it only through this registry.
#pragma once

#include <functional>
#include <string>

#include "src/base/registry.hpp"

namespace arcoll {

class Communicator;

struct LinkCostsSource {
  static constexpr const char* kKind = "link-cost source";
  std::string name;
  // Collective: gives the communicator its link costs; says where they came from.
  std::function<std::string(Communicator&)> apply;
};

// Applies the registered sources in name order (one, in a full build: the calibration).
void apply_link_costs_sources(Communicator& comm);

}  // namespace arcoll
