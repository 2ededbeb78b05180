// Reading back what arbench wrote: sweep results (arcoll.arbench/1), replays
// (arbench.replay/1), replayed communication traces (arbench.comms-trace/1) and training runs
// (arbench.train/1), for compare, plot and report.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace arbench {

using ResultsJson = nlohmann::ordered_json;

// One group of a sweep row as read back.
struct GroupFigures {
  double time_us = 0;
  double busbw_gbs = 0;
  std::optional<double> cv;  // --repeat's coefficient of variation
  // --repeat's typical spread: how far below the median time the fastest repetition was, as
  // a fraction of the median. A stall in one repetition, which swells cv, leaves it alone.
  std::optional<double> spread;
};

// A sweep row and what identifies it across files.
struct ResultRow {
  std::string backend;    // "arcoll", "arcoll/ring", "mpi", ...
  std::string collective = "allreduce";
  std::string algorithm;  // the run's algorithm (metadata), for arcoll rows
  std::string transport;
  std::string type, op;
  int world_size = 0;
  std::size_t size_bytes = 0;
  GroupFigures out_of_place, in_place;
  // (collective, backend, algorithm, transport, type, op, world size, size): rows of two runs
  // that measure the same thing have the same key.
  std::string key() const;
  // The same without the size: one line of a plot.
  std::string series() const;
};

struct ResultsFile {
  std::string path;
  std::string schema;  // "arcoll.arbench/1", "arbench.replay/1", "arbench.comms-trace/1", "arbench.train/1"
  ResultsJson json;
  std::vector<ResultRow> rows;  // sweeps only
};

// Throws std::runtime_error naming the file (and the field) when it cannot be read, is not
// JSON, or is none of the three kinds.
ResultsFile load_results(const std::string& path);

}  // namespace arbench
