// What arbench train prints and writes: one table row per configuration and backend, the
// ranking of a sweep, and the JSON file (schema arbench.train/1, read by arbench report).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "trainer.hpp"

namespace arbench::train {

struct TrainRow {
  TrainConfig config;
  TrainResult result;
  double predicted_iteration = -1;  // from the layer profile (--profile-layers), seconds
};

std::string table_header();
std::string table_row(const TrainRow& row);
// Each backend's iteration time against the first's, per configuration.
std::string backend_comparison(const std::vector<TrainRow>& rows);
// Configurations ranked by time to the target accuracy (those that reach it first), then by
// accuracy; by iteration time where nothing was evaluated. Ends with the best one.
std::string ranking(const std::vector<TrainRow>& rows, double target_accuracy);
nlohmann::json results_json(const std::vector<TrainRow>& rows, const nlohmann::json& metadata);

}  // namespace arbench::train
