// What matters for communication on this host: packages, cores, NUMA nodes with their memory,
// caches, network interfaces (speed, MTU, state, default route, NUMA locality), the PCI tree
// of NICs, RDMA devices and GPUs, RDMA ports and GPU-to-GPU links. Sources: sysfs and procfs
// (every Linux host; unlike hwloc they also list the interfaces of a network namespace), hwloc
// (the PCI tree), libibverbs (RDMA ports), the CUDA runtime and NVML (GPUs, P2P, NVLink).
// A source that is missing from the build or the host is reported in `notes`, never fatal.
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
  double gbps = 0;         // data rate of the link: lanes x lane speed; 0 unknown
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
  int cuda_device = -1;  // its CUDA device number; -1 not seen by the CUDA runtime
  std::string name;      // "NVIDIA H100 80GB HBM3" (from CUDA)
  std::uint64_t memory_bytes = 0;
};

// How two GPUs reach each other (CUDA P2P and NVML).
struct GpuLink {
  int a = 0, b = 0;           // indices into HostTopology::gpus
  bool p2p = false;           // cudaDeviceCanAccessPeer
  int performance_rank = -1;  // CUDA's relative P2P performance (lower is faster)
  int nvlinks = 0;            // active NVLinks from a to b
};

// A PCI device from hwloc's PCI tree and where it sits.
struct PciDevice {
  std::string bus_id;                   // "0000:3b:00.0"
  std::string kind;                     // "Ethernet", "InfiniBand", "3D", "VGA", "Storage", ...
  std::vector<std::string> os_devices;  // what the OS calls it: "eth0", "mlx5_0", "cuda0", ...
  std::string root;                     // its root complex (host bridge): "0000:00"
  std::vector<std::string> bridges;     // PCI bridges (switch ports) above it, root first
  int numa_node = -1;
  double link_gbs = 0;  // PCIe link bandwidth in GB/s; 0 not reported
};

// How close two PCI devices are, as NCCL ranks GPU-NIC paths: "same PCI switch", "same root
// complex" (through the host bridge), "same NUMA node", "across NUMA nodes".
std::string pci_locality(const PciDevice& a, const PciDevice& b);

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
  std::vector<GpuLink> gpu_links;      // every ordered pair of GPUs the CUDA runtime sees
  std::vector<PciDevice> pci_devices;  // from hwloc
  std::vector<std::string> notes;      // sources missing or empty, said plainly
};

HostTopology discover_host_topology();
// The network interfaces alone (getifaddrs and sysfs: no library loaded), as above.
std::vector<NetworkInterface> discover_network_interfaces();

// A readable tree (like lstopo, only what matters for communication) and the same as JSON.
std::string topology_text(const HostTopology& topology);
std::string topology_json(const HostTopology& topology);

}  // namespace arcoll

namespace arcoll {

class Communicator;

// Where one rank runs, as it sees it.
struct RankPlacement {
  int rank = 0;
  std::string host;    // Communicator::node_name()
  int numa_node = -1;  // of the CPU it runs on now; -1 unknown
  int package = -1;    // socket of that CPU
  int cpu = -1;
  std::string nic;  // the interface of its default route ("" none)
  int nic_speed_mbps = -1;
  int gpus = 0;  // GPUs its host has
};

// Every rank's placement, gathered through the communicator, and the class of link between
// any two ranks.
struct ClusterView {
  std::vector<std::string> hosts;  // in order of their lowest rank
  std::vector<RankPlacement> ranks;
  // "same host, same NUMA node", "same host, same package, across NUMA nodes", "same host,
  // across packages", "network (eth0 10000 Mb/s -> eth0 10000 Mb/s)".
  std::string link_class(int a, int b) const;
};

// Collective: every rank calls it and gets the whole view.
ClusterView gather_cluster_view(Communicator& comm, const HostTopology& here);
std::string cluster_view_text(const ClusterView& view);
// Graphviz: one box per host holding its ranks (NUMA node, CPU), its NIC and GPUs; hosts
// joined through the network with the NIC speeds.
std::string cluster_view_dot(const ClusterView& view);

}  // namespace arcoll
