// `arbench links`: latency and bandwidth between every ordered pair of ranks, pairs scheduled
// so that each rank is in one pair at a time, and slow pairs flagged: the first thing to run
// when validating an interconnect (a slow cable, port or NIC shows as the pairs of one host).
//
// What a pair is judged against: with a baseline (an earlier run's --json), the same pair
// then; across three or more hosts, each host's pairs against the pairs between the other
// hosts (a median over every pair would call the healthy hosts slow once the slow host's
// pairs are half of them, as with 3 hosts); within a host, the median of the pairs within
// hosts. Two hosts without a baseline are judged against the NICs' nominal speed where both
// NICs report one (a physical NIC on the default route; virtual NICs report a figure that
// means nothing); otherwise the link is measured, not judged, and the output says so.
// --expect RATE (what the fabric should deliver) judges every pair between hosts against it,
// whatever the number of hosts: that is how an all-slow fabric is caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arcoll/communicator.hpp"

namespace arbench {

// An earlier run's pairs (links_json), to judge each pair against.
struct LinkBaseline {
  std::string path;
  int ranks = 0;
  std::vector<double> bandwidth_gbs;  // [from * ranks + to]
};
// std::runtime_error naming the file and the field when it is not a links --json file.
LinkBaseline load_link_baseline(const std::string& path);

struct LinkSettings {
  std::size_t small_bytes = 8;  // latency: ping-pong of this size
  int small_rounds = 200;
  std::size_t large_bytes = 1 << 20;  // bandwidth: a stream of messages of this size
  int large_messages = 8;
  double slow_fraction = 0.5;  // flagged below this fraction of the reference bandwidth
  std::optional<LinkBaseline> baseline;
  double expected_gbs = 0;  // --expect: the rate between hosts, GB/s; 0 not given
};

struct LinkMatrix {
  int ranks = 0;
  std::vector<std::string> hosts;     // of each rank
  std::vector<std::int32_t> nic_mbps;  // nominal speed of each rank's NIC, -1 unknown or virtual
  std::vector<double> latency_us;     // [from * ranks + to], one way
  std::vector<double> bandwidth_gbs;  // [from * ranks + to]
  double median_latency_us = 0;
  double median_bandwidth_gbs = 0;
  double slow_fraction = 0.5;
  std::vector<double> reference_gbs;  // [from * ranks + to]: what it is judged against, 0: not
  std::string reference;              // which reference was used, in words
  std::vector<std::pair<int, int>> slow;  // (from, to) below slow_fraction of its reference
  std::vector<std::string> slow_hosts;    // hosts whose pairs are slow against the others'
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

// Collective: every rank calls it; every rank gets the whole matrix, judged.
LinkMatrix measure_links(arcoll::Communicator& comm, const LinkSettings& settings);
// Fills the matrix's references, slow pairs, slow hosts and suspect from its bandwidths and
// hosts, as the header says.
void judge_links(LinkMatrix& matrix, const LinkSettings& settings);
// The matrices as text tables, the medians, and the flagged pairs.
std::string links_text(const LinkMatrix& matrix);
std::string links_json(const LinkMatrix& matrix);

}  // namespace arbench
