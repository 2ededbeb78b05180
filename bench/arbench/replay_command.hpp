// `arbench replay`: the gradient exchange of data-parallel training over the ranks at hand (or
// predicted for a described cluster), one configuration or a sweep of them; and replays of
// communication traces recorded elsewhere.
#pragma once

#include <string>

#include "arbench/cli.hpp"

namespace CLI {
class App;
}

namespace arbench {

struct ReplayFlags {
  std::string model = "resnet50";
  std::string batch = "32";
  std::string profile = "v100";
  // Under --sweep, these four take comma-separated lists (or "all"); empty: the default, one
  // value or the sweep's list.
  std::string policy;
  std::string algorithm;
  std::string wire;
  std::string bucket_bytes;
  std::string iterations = "20";
  std::string warmup = "3";
  std::string trace;     // Chrome trace file
  std::string json;      // everything, as JSON
  std::string topology;  // --simulate: the cluster file
  std::string hosts = "1";
  bool simulate = false;
  bool sweep = false;
  // A recorded communication trace (PARAM's basic format) instead of a model.
  std::string comms_trace;
  bool back_to_back = false;
};

void add_replay_flags(CLI::App* replay, ReplayFlags& flags);
int run_replay_command(const ToolFlags& tool, const ReplayFlags& flags);

}  // namespace arbench
