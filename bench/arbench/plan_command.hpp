// `arbench plan --topology FILE`: every algorithm's predicted time on a described cluster, size
// by size, and what auto would run: planning for hardware we do not have.
#pragma once

#include <string>

namespace arbench {

struct PlanFlags {
  std::string topology;
  std::string hosts = "1";
  std::string min_bytes = "8";
  std::string max_bytes = "1G";
  std::string step_factor = "4";
  std::string ps_servers = "0";  // parameter-server columns: dedicated server hosts each
};

int run_plan_command(const PlanFlags& flags);

}  // namespace arbench
