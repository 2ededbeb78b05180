// `arbench links`: the latency and bandwidth between every ordered pair of ranks, slow pairs
// flagged (the measurement itself: links.hpp).
#pragma once

#include <string>

#include "arbench/cli.hpp"

namespace arbench {

struct LinksFlags {
  ToolFlags tool;
  std::string bytes = "1M";
  std::string threshold = "0.5";
  std::string json;
  std::string baseline;
  std::string expect;  // a rate: 100mbit, 25gbit
};

int run_links_command(const LinksFlags& flags);

}  // namespace arbench
