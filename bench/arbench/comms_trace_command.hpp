// `arbench replay --comms-trace PATH`: a communication trace recorded elsewhere (PARAM's basic
// format), replayed over the ranks at hand, with latency statistics per collective.
#pragma once

#include "arbench/cli.hpp"

namespace arbench {

struct ReplayFlags;

int run_comms_trace_command(const ToolFlags& tool, const ReplayFlags& flags);

}  // namespace arbench
