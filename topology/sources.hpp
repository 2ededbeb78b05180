// Discovery sources beyond sysfs, each in its own file and each optional: built when its
// library was found at configure time, otherwise it only says in the notes that it is absent.
#pragma once

#include "arcoll/topology.hpp"

namespace arcoll::discovery {

// hwloc: the PCI tree with the OS devices on it and their NUMA locality.
void pci_tree(HostTopology& t);
// libibverbs: RDMA devices and ports with state, link layer, speed and width. Returns false
// when libibverbs is not in this build (sysfs then says what it can).
bool rdma_ports(HostTopology& t);
// CUDA runtime and NVML: the GPUs CUDA sees, P2P access between them and NVLinks.
void cuda_gpus(HostTopology& t);

}  // namespace arcoll::discovery
