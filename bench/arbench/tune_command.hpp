// `arbench tune`: measures each transport's link costs between the ranks at hand and writes
// the tuning file that --tuning (ARCOLL_TUNING_FILE) reads.
#pragma once

#include <string>

#include "arbench/cli.hpp"

namespace arbench {

struct TuneFlags {
  ToolFlags tool;
  std::string output = "arcoll-tuning.json";
};

int run_tune_command(const TuneFlags& flags);

}  // namespace arbench
