// `arbench models`: the networks the replayer trains, from replay/models or a model file.
#pragma once

#include <string>

namespace arbench {

struct ModelsFlags {
  std::string model;    // a built-in name or a .json/.csv file; empty: every built-in model
  int image_size = 0;   // 0: each model's own
  bool layers = false;  // every layer, in the order backward produces the gradients
};

// Prints the summary (and layers); returns 0, or 2 after a message naming what is wrong.
int run_models_command(const ModelsFlags& flags);

}  // namespace arbench
