// `arbench topo`: this host, and with several ranks (--np, or a launcher) where every rank
// runs and the class of link between them.
#pragma once

#include <string>

#include "arbench/cli.hpp"

namespace arbench {

struct TopoFlags {
  ToolFlags tool;
  std::string json;
  std::string dot;
};

int run_topo_command(const TopoFlags& flags);

}  // namespace arbench
