// arbench train's command line: its flags as text, and the plan make_plan() validates them
// into (every error a UsageError naming the flag).
#pragma once
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer.hpp"

namespace arbench::train {

// Every flag as text, validated by make_plan with messages that name the flag.
struct Flags {
  std::string np, model = "lenet", backends, policy = "buckets", bucket_bytes = "25M",
                  algo = "auto", wire = "f32", batch = "32", lr = "0.05", reference_batch = "128",
                  lr_scaling = "none", warmup_epochs = "0", lars = "off", momentum = "0.9",
                  weight_decay = "1e-4", epochs, steps, target = "0.89", seed = "1",
                  data = kFashionMnistDir, json, profile_layers, timeout, threads = "1", transport,
                  mpirun_args, ps_servers = "0", test_images, kill, device = "cpu";
  bool list_models = false, elastic = false;
};

struct Plan {
  std::optional<int> np;  // workers
  int ps_servers = 0;     // dedicated parameter servers: the job's last ranks
  int threads = 1;
  std::optional<std::int64_t> test_images;  // evaluated: the test set's first N (default all)
  std::vector<std::string> backends;
  std::vector<TrainConfig> configs;
  std::string data, json, profile_layers, transport, mpirun_args;
  std::optional<std::chrono::milliseconds> timeout;
  bool elastic = false;
  int kill_rank = -1;  // --kill RANK@STEP: the rank that dies, -1 none
};

// "ps-ssp:2" is the backend "ps-ssp" with the parameter "2".
std::pair<std::string, std::string> backend_name(const std::string& backend);
Plan make_plan(const Flags& flags);
void add_flags(CLI::App& app, Flags& f);

}  // namespace arbench::train
