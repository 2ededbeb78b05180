// A cluster described rather than discovered, for planning on hardware we do not have: hosts,
// ranks per host, the link between ranks of a host (shared memory, NVLink, PCIe) and the
// network between hosts (NICs per host and their speed). Read from JSON written by hand (see
// examples/topologies/) or from a host saved by `arbench topo --json`; the cost model then
// predicts every all-reduce algorithm on it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"

namespace arcoll {

struct LinkSpec {
  std::string kind;          // a transport's name, "nvlink", "pcie", "ethernet", "infiniband", ...
  double latency_us = 0;     // one small message, one way
  double bandwidth_gbs = 0;  // GB/s one rank can send over it (per host for the network)
  double reduce_gbs = 0;     // GB/s a rank reduces at (f32 sum)
};

struct ClusterSpec {
  std::string name;
  int hosts = 1;
  int ranks_per_host = 1;
  LinkSpec intra_host;
  // bandwidth_gbs: the host's total over all its NICs (in the file: "bandwidth_gbs", or
  // "nics" and "nic_gbps", the line rate of one NIC in Gb/s).
  LinkSpec network;
  int nics_per_host = 1;
};

// Default figures of a link class (a transport of this build by its name: "shm"; or "nvlink",
// "pcie", "infiniband", "roce", "ethernet"), used for what a cluster file leaves out; 0 where
// the class has no typical value (network bandwidth, which the NICs set; any unknown kind).
LinkSpec default_link(const std::string& kind);

// Parses `text` (the file's contents; `source` names it in errors). Accepts the cluster format
// ("schema": "arcoll.cluster/1") and a host saved by `arbench topo --json`
// ("arcoll.topology/1": one host, a rank per GPU on NVLink or PCIe, or without GPUs a rank per
// logical CPU on shared memory; its active RDMA ports, else its default-route interface,
// across hosts; `hosts` sets how many such hosts). A link's latency_us, bandwidth_gbs (not the
// network's) and reduce_gbs may be left out when its kind has a default (default_link).
// ConfigurationError naming the source and the field at fault.
ClusterSpec parse_cluster(const std::string& text, const std::string& source, int hosts = 1);
ClusterSpec load_cluster(const std::string& path, int hosts = 1);

// The cost model's prediction for an all-reduce of `bytes` with every algorithm on `cluster`
// (in Communicator::allreduce_algorithms() order), and what auto would choose; beside them a
// parameter server's push_pull with each count of dedicated server hosts in
// `parameter_servers` (0: a share in every worker; the servers' links like the hosts').
struct ClusterPlan {
  std::vector<Prediction> algorithms;
  Prediction chosen;
  std::vector<Prediction> parameter_servers;
};
ClusterPlan plan_allreduce(const ClusterSpec& cluster, std::size_t bytes,
                           const std::vector<int>& parameter_servers = {});

}  // namespace arcoll
