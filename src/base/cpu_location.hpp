// Where a CPU sits, from sysfs: the rendezvous records the NUMA node each rank joins from, the
// topology views the package too; the cost model sizes the caches.
#pragma once

namespace arcoll {

// The NUMA node and the package (socket) of `cpu`; -1 when unknown.
int numa_node_of_cpu(int cpu);
int package_of_cpu(int cpu);
// Bytes of the outermost data cache of `cpu` (L3 on most servers); 0 when unknown.
double last_level_cache_bytes(int cpu);

}  // namespace arcoll
