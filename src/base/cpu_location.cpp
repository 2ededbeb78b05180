#include "src/base/cpu_location.hpp"

#include <unistd.h>

#include <exception>
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

double last_level_cache_bytes(int cpu) {
  if (cpu < 0) return 0;
  // indexN folders, one per cache; sizes read "32768K". The highest level that holds data.
  const std::string folder = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cache/index";
  int best_level = 0;
  double bytes = 0;
  for (int index = 0; index < 16; ++index) {
    std::ifstream level_file(folder + std::to_string(index) + "/level");
    std::ifstream type_file(folder + std::to_string(index) + "/type");
    std::ifstream size_file(folder + std::to_string(index) + "/size");
    if (!level_file) break;  // no more caches
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    if (type == "Instruction" || level <= best_level) continue;
    double value = 0;
    try {
      value = std::stod(size);
    } catch (const std::exception&) {
      continue;
    }
    const char unit = size.back();
    const double kibi = 1024.0;
    value *= unit == 'K' ? kibi : unit == 'M' ? kibi * kibi : unit == 'G' ? kibi * kibi * kibi : 1;
    best_level = level;
    bytes = value;
  }
  return bytes;
}

}  // namespace arcoll
