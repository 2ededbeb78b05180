// `arbench links`: latency and bandwidth between every ordered pair of ranks, pairs scheduled
// so that each rank is in one pair at a time, and the pairs well below the median flagged:
// the first thing to run when validating an interconnect (a slow cable, port or NIC shows as
// the pairs of one host).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "arcoll/communicator.hpp"

namespace arbench {

struct LinkSettings {
  std::size_t small_bytes = 8;  // latency: ping-pong of this size
  int small_rounds = 200;
  std::size_t large_bytes = 1 << 20;  // bandwidth: a stream of messages of this size
  int large_messages = 8;
  double slow_fraction = 0.5;  // flagged below this fraction of the median bandwidth
};

struct LinkMatrix {
  int ranks = 0;
  std::vector<std::string> hosts;     // of each rank
  std::vector<double> latency_us;     // [from * ranks + to], one way
  std::vector<double> bandwidth_gbs;  // [from * ranks + to]
  double median_latency_us = 0;
  double median_bandwidth_gbs = 0;
  double slow_fraction = 0.5;
  std::vector<std::pair<int, int>> slow;  // (from, to) below slow_fraction of the median
  // The rank in every slow pair, when there is one: its link or NIC is the suspect.
  int suspect = -1;

  double latency(int from, int to) const { return latency_us[index(from, to)]; }
  double bandwidth(int from, int to) const { return bandwidth_gbs[index(from, to)]; }
  std::size_t index(int from, int to) const {
    return static_cast<std::size_t>(from) * static_cast<std::size_t>(ranks) +
           static_cast<std::size_t>(to);
  }
};

// The rounds of pairs: in each, every rank is in at most one pair (the circle method).
std::vector<std::vector<std::pair<int, int>>> pair_rounds(int ranks);

// Collective: every rank calls it; every rank gets the whole matrix.
LinkMatrix measure_links(arcoll::Communicator& comm, const LinkSettings& settings);
// The matrices as text tables, the medians, and the flagged pairs.
std::string links_text(const LinkMatrix& matrix);
std::string links_json(const LinkMatrix& matrix);

}  // namespace arbench
