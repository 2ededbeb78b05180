// What matters for communication on this host: packages, cores, NUMA nodes with their memory,
// caches, network interfaces (speed, MTU, state, default route, NUMA locality), RDMA devices
// and GPUs. Read from sysfs and procfs, which every Linux host has (and which, unlike hwloc,
// also list the interfaces of a network namespace). A source that is missing is reported in
// `notes`, never fatal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arcoll {

struct NumaNode {
  int id = 0;
  std::string cpus;  // "0-15,32-47"
  std::uint64_t memory_bytes = 0;
};

struct Cache {
  int level = 0;
  std::string type;  // "Data", "Instruction", "Unified"
  std::uint64_t size_bytes = 0;
  int shared_by_cpus = 0;
};

struct NetworkInterface {
  std::string name;
  std::vector<std::string> addresses;  // IPv4 and IPv6
  int speed_mbps = -1;                 // -1: the driver does not say (virtual NICs)
  int mtu = 0;
  std::string state;  // operstate: "up", "down", "unknown"
  bool default_route = false;
  bool loopback = false;
  int numa_node = -1;  // -1: not attached to a NUMA node (virtual) or a single-node host
  std::string driver;
};

struct RdmaPort {
  int port = 0;
  std::string state;       // "ACTIVE", "DOWN"
  std::string link_layer;  // "InfiniBand", "Ethernet"
  std::string rate;        // "100 Gb/sec (4X EDR)"
};

struct RdmaDevice {
  std::string name;  // "mlx5_0"
  int numa_node = -1;
  std::vector<RdmaPort> ports;
};

struct Gpu {
  std::string pci_bus_id;  // "0000:3b:00.0"
  std::string vendor;      // "NVIDIA", "AMD"
  int numa_node = -1;
};

struct HostTopology {
  std::string hostname;
  std::string cpu_model;
  int packages = 0;
  int physical_cores = 0;
  int logical_cpus = 0;
  std::uint64_t memory_bytes = 0;
  std::vector<NumaNode> numa_nodes;
  std::vector<Cache> caches;  // of CPU 0
  std::vector<NetworkInterface> interfaces;
  std::vector<RdmaDevice> rdma_devices;
  std::vector<Gpu> gpus;
  std::vector<std::string> notes;  // sources missing or empty, said plainly
};

HostTopology discover_host_topology();

// A readable tree (like lstopo, only what matters for communication) and the same as JSON.
std::string topology_text(const HostTopology& topology);
std::string topology_json(const HostTopology& topology);

}  // namespace arcoll

namespace arcoll {

class Communicator;

// Where one rank runs, as it sees it.
struct RankPlacement {
  int rank = 0;
  std::string host;   // Communicator::node_name()
  int numa_node = -1;  // of the CPU it runs on now; -1 unknown
  int cpu = -1;
  std::string nic;     // the interface of its default route ("" none)
  int nic_speed_mbps = -1;
  int gpus = 0;        // GPUs its host has
};

// Every rank's placement, gathered through the communicator, and the class of link between
// any two ranks.
struct ClusterView {
  std::vector<std::string> hosts;  // in order of their lowest rank
  std::vector<RankPlacement> ranks;
  // "same NUMA node", "same host, across NUMA nodes", "network (eth0, 10000 Mb/s)", ...
  std::string link_class(int a, int b) const;
};

// Collective: every rank calls it and gets the whole view.
ClusterView gather_cluster_view(Communicator& comm, const HostTopology& here);
std::string cluster_view_text(const ClusterView& view);
// Graphviz: one box per host holding its ranks (NUMA node, CPU), its NIC and GPUs; hosts
// joined through the network with the NIC speeds.
std::string cluster_view_dot(const ClusterView& view);

}  // namespace arcoll
