#include "base/cpu_location.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

namespace arcoll {

int numa_node_of_cpu(int cpu) {
  if (cpu < 0) return -1;
  // The cpuN folder holds a nodeM link for its NUMA node.
  const std::string folder = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/";
  for (int node = 0; node < 1024; ++node)
    if (::access((folder + "node" + std::to_string(node)).c_str(), F_OK) == 0) return node;
  return -1;
}

int package_of_cpu(int cpu) {
  if (cpu < 0) return -1;
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                   "/topology/physical_package_id");
  int package = -1;
  return in >> package ? package : -1;
}

}  // namespace arcoll
