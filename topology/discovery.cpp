#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "arcoll/host.hpp"
#include "arcoll/topology.hpp"
#include "topology/sources.hpp"

namespace arcoll {
namespace {

namespace fs = std::filesystem;

// First line of a sysfs file, or `fallback` when it cannot be read.
std::string read_line(const fs::path& path, const std::string& fallback = "") {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return fallback;
  return line;
}

int read_int(const fs::path& path, int fallback) {
  const std::string text = read_line(path);
  try {
    return text.empty() ? fallback : std::stoi(text);
  } catch (const std::exception&) {
    return fallback;
  }
}

// Entries of a folder whose names start with `prefix`, sorted; none when it is absent.
std::vector<fs::path> entries(const fs::path& folder, const std::string& prefix = "") {
  std::vector<fs::path> out;
  std::error_code error;
  for (const auto& e : fs::directory_iterator(folder, error))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// "32K", "1024K", "36608K" (sysfs cache sizes).
std::uint64_t parse_cache_size(const std::string& text) {
  std::uint64_t value = 0;
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])))
    value = value * 10 + static_cast<std::uint64_t>(text[i++] - '0');
  if (i < text.size() && (text[i] == 'K' || text[i] == 'k')) value <<= 10;
  if (i < text.size() && text[i] == 'M') value <<= 20;
  return value;
}

// Number of CPUs in a list like "0-3,8,10-11".
int count_cpus(const std::string& list) {
  int count = 0;
  std::stringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    const auto dash = part.find('-');
    try {
      count +=
          dash == std::string::npos ? 1 : std::stoi(part.substr(dash + 1)) - std::stoi(part) + 1;
    } catch (const std::exception&) {
    }
  }
  return count;
}

void discover_cpus(HostTopology& t) {
  const fs::path cpus = "/sys/devices/system/cpu";
  std::set<std::pair<int, int>> cores;  // (package, core)
  std::set<int> packages;
  for (const auto& cpu : entries(cpus, "cpu")) {
    const std::string name = cpu.filename().string();
    if (name.size() < 4 || !std::isdigit(static_cast<unsigned char>(name[3]))) continue;
    if (!fs::exists(cpu / "topology")) continue;  // offline
    const int package = read_int(cpu / "topology/physical_package_id", 0);
    packages.insert(package);
    cores.insert({package, read_int(cpu / "topology/core_id", 0)});
  }
  t.packages = static_cast<int>(packages.size());
  t.physical_cores = static_cast<int>(cores.size());
  if (cores.empty()) t.notes.push_back("no CPU topology in /sys/devices/system/cpu");
  for (const auto& index : entries(cpus / "cpu0/cache", "index")) {
    Cache c;
    c.level = read_int(index / "level", 0);
    c.type = read_line(index / "type", "?");
    c.size_bytes = parse_cache_size(read_line(index / "size"));
    c.shared_by_cpus = count_cpus(read_line(index / "shared_cpu_list"));
    t.caches.push_back(c);
  }
}

void discover_numa(HostTopology& t) {
  for (const auto& node : entries("/sys/devices/system/node", "node")) {
    const std::string name = node.filename().string();
    if (name.size() < 5 || !std::isdigit(static_cast<unsigned char>(name[4]))) continue;
    NumaNode n;
    n.id = std::stoi(name.substr(4));
    n.cpus = read_line(node / "cpulist");
    std::ifstream meminfo(node / "meminfo");
    std::string line;
    while (std::getline(meminfo, line))
      if (auto at = line.find("MemTotal:"); at != std::string::npos)
        n.memory_bytes = std::stoull(line.substr(at + 9)) * 1024;
    t.numa_nodes.push_back(n);
  }
  if (t.numa_nodes.empty())
    t.notes.push_back("no NUMA information (/sys/devices/system/node absent): one memory domain");
}

std::set<std::string> default_route_interfaces() {
  std::set<std::string> out;
  std::ifstream in("/proc/net/route");
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::stringstream fields(line);
    std::string name, destination, gateway, flags, refcnt, use, metric, mask;
    fields >> name >> destination >> gateway >> flags >> refcnt >> use >> metric >> mask;
    if (destination == "00000000" && mask == "00000000") out.insert(name);
  }
  return out;
}

void discover_interfaces(HostTopology& t) {
  // getifaddrs, not hwloc: inside a network namespace only it lists the namespace's links.
  std::map<std::string, NetworkInterface> found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    t.notes.push_back("network interfaces unreadable (getifaddrs failed)");
    return;
  }
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    NetworkInterface& nic = found[a->ifa_name];
    nic.name = a->ifa_name;
    nic.loopback = (a->ifa_flags & IFF_LOOPBACK) != 0;
    if (a->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                  sizeof text);
    else if (a->ifa_addr->sa_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, text,
                  sizeof text);
    if (text[0] != '\0') nic.addresses.emplace_back(text);
  }
  ::freeifaddrs(list);
  const auto routed = default_route_interfaces();
  for (auto& [name, nic] : found) {
    const fs::path sys = fs::path("/sys/class/net") / name;
    nic.speed_mbps = read_int(sys / "speed", -1);
    nic.mtu = read_int(sys / "mtu", 0);
    nic.state = read_line(sys / "operstate", "unknown");
    nic.numa_node = read_int(sys / "device/numa_node", -1);
    std::error_code error;
    const fs::path driver = fs::read_symlink(sys / "device/driver", error);
    if (!error) nic.driver = driver.filename().string();
    nic.default_route = routed.count(name) != 0;
    t.interfaces.push_back(nic);
  }
}

// Without libibverbs in the build: what sysfs says of the ports.
void discover_rdma_sysfs(HostTopology& t) {
  const fs::path root = "/sys/class/infiniband";
  for (const auto& device : entries(root)) {
    RdmaDevice d;
    d.name = device.filename().string();
    d.numa_node = read_int(device / "device/numa_node", -1);
    for (const auto& port : entries(device / "ports")) {
      RdmaPort p;
      try {
        p.port = std::stoi(port.filename().string());
      } catch (const std::exception&) {
      }
      // "4: ACTIVE" -> "ACTIVE"
      const std::string state = read_line(port / "state", "?");
      p.state = state.substr(state.find(':') == std::string::npos ? 0 : state.find(':') + 2);
      p.link_layer = read_line(port / "link_layer", "?");
      p.rate = read_line(port / "rate", "?");
      p.gbps = std::atof(p.rate.c_str());  // "100 Gb/sec (4X EDR)"
      d.ports.push_back(p);
    }
    t.rdma_devices.push_back(d);
  }
  if (t.rdma_devices.empty())
    t.notes.push_back(
        "no RDMA device found (" + root.string() +
        " is absent or empty): no InfiniBand or RoCE; TCP carries traffic between hosts");
}

void discover_gpus(HostTopology& t) {
  // PCI display controllers (class 0x03xxxx) of GPU vendors, whether or not a driver is loaded.
  const std::map<std::string, std::string> vendors = {
      {"0x10de", "NVIDIA"}, {"0x1002", "AMD"}, {"0x8086", "Intel"}};
  for (const auto& device : entries("/sys/bus/pci/devices")) {
    const std::string cls = read_line(device / "class");
    if (cls.rfind("0x03", 0) != 0) continue;
    auto vendor = vendors.find(read_line(device / "vendor"));
    if (vendor == vendors.end() || vendor->second == "Intel") continue;  // integrated graphics
    Gpu gpu;
    gpu.pci_bus_id = device.filename().string();
    gpu.vendor = vendor->second;
    gpu.numa_node = read_int(device / "numa_node", -1);
    t.gpus.push_back(gpu);
  }
  if (t.gpus.empty())
    t.notes.push_back(
        "no GPU found (no NVIDIA or AMD display controller on the PCI bus): no CUDA IPC, NVLink or "
        "NCCL here");
}

std::string bytes_text(std::uint64_t bytes) {
  char text[32];
  if (bytes >= (1ull << 30))
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1ull << 20));
  else
    std::snprintf(text, sizeof text, "%llu KiB", static_cast<unsigned long long>(bytes >> 10));
  return text;
}

// Like `nvidia-smi topo -m`: per pair of GPUs, NVn for n NVLinks, P2P for peer access over
// PCIe, "-" for none.
std::string gpu_matrix_text(const HostTopology& t) {
  if (t.gpu_links.empty()) return {};
  std::string out = "  GPU links (NVn: n NVLinks, P2P: peer access over PCIe, -: none):\n       ";
  char cell_text[64];
  for (std::size_t b = 0; b < t.gpus.size(); ++b) {
    std::snprintf(cell_text, sizeof cell_text, " GPU%-3zu", b);
    out += cell_text;
  }
  out += "\n";
  for (std::size_t a = 0; a < t.gpus.size(); ++a) {
    std::snprintf(cell_text, sizeof cell_text, "    GPU%-3zu", a);
    out += cell_text;
    for (std::size_t b = 0; b < t.gpus.size(); ++b) {
      std::string cell = a == b ? "X" : "-";
      for (const GpuLink& l : t.gpu_links)
        if (static_cast<std::size_t>(l.a) == a && static_cast<std::size_t>(l.b) == b)
          cell = l.nvlinks > 0 ? "NV" + std::to_string(l.nvlinks) : l.p2p ? "P2P" : "-";
      std::snprintf(cell_text, sizeof cell_text, " %-6s", cell.c_str());
      out += cell_text;
    }
    out += "\n";
  }
  return out;
}

bool is_network(const PciDevice& d) {
  return d.kind == "Ethernet" || d.kind == "InfiniBand" || d.kind == "Network";
}

// The PCI tree, then how close each GPU is to each NIC (what GPUDirect RDMA depends on).
std::string pci_text(const HostTopology& t) {
  if (t.pci_devices.empty()) return {};
  std::string out = "  PCI devices (hwloc):\n";
  for (const PciDevice& d : t.pci_devices) {
    std::string names, path = "root " + d.root;
    for (const auto& n : d.os_devices) names += (names.empty() ? "" : ",") + n;
    for (const auto& b : d.bridges) path += " > " + b;
    char line[512];
    std::snprintf(line, sizeof line, "    %s %-11s %-14s %s%s", d.bus_id.c_str(), d.kind.c_str(),
                  names.empty() ? "-" : names.c_str(), path.c_str(),
                  d.numa_node >= 0 ? (", NUMA " + std::to_string(d.numa_node)).c_str() : "");
    out += line;
    if (d.link_gbs > 0) {
      std::snprintf(line, sizeof line, ", link %.1f GB/s", static_cast<double>(d.link_gbs));
      out += line;
    }
    out += "\n";
  }
  for (const Gpu& g : t.gpus)
    for (const PciDevice& gpu : t.pci_devices)
      if (gpu.bus_id == g.pci_bus_id)
        for (const PciDevice& nic : t.pci_devices)
          if (is_network(nic))
            out += "    GPU " + g.pci_bus_id + " <-> NIC " + nic.bus_id + ": " +
                   pci_locality(gpu, nic) + "\n";
  return out;
}

}  // namespace

HostTopology discover_host_topology() {
  HostTopology t;
  const HostInfo host = host_info();
  t.hostname = host.hostname;
  t.cpu_model = host.cpu_model;
  t.logical_cpus = host.cores;
  t.memory_bytes = host.memory_bytes;
  discover_cpus(t);
  discover_numa(t);
  discover_interfaces(t);
  if (!discovery::rdma_ports(t)) discover_rdma_sysfs(t);
  discover_gpus(t);
  discovery::cuda_gpus(t);
  discovery::pci_tree(t);
  return t;
}

std::vector<NetworkInterface> discover_network_interfaces() {
  HostTopology t;
  discover_interfaces(t);
  return t.interfaces;
}

std::string topology_text(const HostTopology& t) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "host %s: %s\n", t.hostname.c_str(), t.cpu_model.c_str());
  out += line;
  std::snprintf(line, sizeof line, "  %d package(s), %d core(s), %d logical CPU(s), %s memory\n",
                t.packages, t.physical_cores, t.logical_cpus, bytes_text(t.memory_bytes).c_str());
  out += line;
  for (const NumaNode& n : t.numa_nodes) {
    std::snprintf(line, sizeof line, "  NUMA node %d: CPUs %s, %s\n", n.id, n.cpus.c_str(),
                  bytes_text(n.memory_bytes).c_str());
    out += line;
  }
  if (!t.caches.empty()) {
    out += "  caches (CPU 0):";
    for (const Cache& c : t.caches) {
      std::snprintf(line, sizeof line, " L%d %s %s (%d CPUs);", c.level, c.type.c_str(),
                    bytes_text(c.size_bytes).c_str(), c.shared_by_cpus);
      out += line;
    }
    out += "\n";
  }
  out += "  network interfaces:\n";
  for (const NetworkInterface& n : t.interfaces) {
    std::string addresses;
    for (const auto& a : n.addresses) addresses += (addresses.empty() ? "" : " ") + a;
    const std::string speed = n.speed_mbps > 0 ? std::to_string(n.speed_mbps) + " Mb/s"
                              : n.loopback     ? std::string("loopback")
                                               : std::string("speed not reported by the driver");
    std::snprintf(line, sizeof line, "    %-10s %-6s %-34s mtu %-6d %s%s%s%s\n", n.name.c_str(),
                  n.state.c_str(), speed.c_str(), n.mtu, addresses.c_str(),
                  n.default_route ? "  [default route]" : "",
                  n.numa_node >= 0 ? ("  NUMA " + std::to_string(n.numa_node)).c_str() : "",
                  n.driver.empty() ? "" : ("  driver " + n.driver).c_str());
    out += line;
  }
  for (const RdmaDevice& d : t.rdma_devices)
    for (const RdmaPort& p : d.ports) {
      std::snprintf(line, sizeof line, "  RDMA %s port %d: %s, %s, %s\n", d.name.c_str(), p.port,
                    p.state.c_str(), p.link_layer.c_str(), p.rate.c_str());
      out += line;
    }
  for (const Gpu& g : t.gpus) {
    std::snprintf(line, sizeof line, "  GPU %s (%s)%s%s%s\n", g.pci_bus_id.c_str(),
                  g.vendor.c_str(),
                  g.numa_node >= 0 ? (" NUMA " + std::to_string(g.numa_node)).c_str() : "",
                  g.cuda_device >= 0
                      ? (", CUDA device " + std::to_string(g.cuda_device) + ": " + g.name).c_str()
                      : "",
                  g.memory_bytes > 0 ? (", " + bytes_text(g.memory_bytes)).c_str() : "");
    out += line;
  }
  out += gpu_matrix_text(t);
  out += pci_text(t);
  for (const std::string& note : t.notes) out += "  note: " + note + "\n";
  return out;
}

std::string topology_json(const HostTopology& t) {
  using nlohmann::json;
  json numa = json::array(), caches = json::array(), nics = json::array(), rdma = json::array(),
       gpus = json::array();
  for (const NumaNode& n : t.numa_nodes)
    numa.push_back({{"id", n.id}, {"cpus", n.cpus}, {"memory_bytes", n.memory_bytes}});
  for (const Cache& c : t.caches)
    caches.push_back({{"level", c.level},
                      {"type", c.type},
                      {"size_bytes", c.size_bytes},
                      {"shared_by_cpus", c.shared_by_cpus}});
  for (const NetworkInterface& n : t.interfaces)
    nics.push_back({{"name", n.name},
                    {"addresses", n.addresses},
                    {"speed_mbps", n.speed_mbps},
                    {"mtu", n.mtu},
                    {"state", n.state},
                    {"default_route", n.default_route},
                    {"loopback", n.loopback},
                    {"numa_node", n.numa_node},
                    {"driver", n.driver}});
  for (const RdmaDevice& d : t.rdma_devices) {
    json ports = json::array();
    for (const RdmaPort& p : d.ports)
      ports.push_back({{"port", p.port},
                       {"state", p.state},
                       {"link_layer", p.link_layer},
                       {"rate", p.rate},
                       {"gbps", p.gbps}});
    rdma.push_back({{"name", d.name}, {"numa_node", d.numa_node}, {"ports", ports}});
  }
  for (const Gpu& g : t.gpus)
    gpus.push_back({{"pci_bus_id", g.pci_bus_id},
                    {"vendor", g.vendor},
                    {"numa_node", g.numa_node},
                    {"cuda_device", g.cuda_device},
                    {"name", g.name},
                    {"memory_bytes", g.memory_bytes}});
  json gpu_links = json::array(), pci = json::array();
  for (const GpuLink& l : t.gpu_links)
    gpu_links.push_back({{"a", l.a},
                         {"b", l.b},
                         {"p2p", l.p2p},
                         {"performance_rank", l.performance_rank},
                         {"nvlinks", l.nvlinks}});
  for (const PciDevice& d : t.pci_devices)
    pci.push_back({{"bus_id", d.bus_id},
                   {"kind", d.kind},
                   {"os_devices", d.os_devices},
                   {"root", d.root},
                   {"bridges", d.bridges},
                   {"numa_node", d.numa_node},
                   {"link_gbs", d.link_gbs}});
  const json doc = {{"schema", "arcoll.topology/1"},
                    {"hostname", t.hostname},
                    {"cpu_model", t.cpu_model},
                    {"packages", t.packages},
                    {"physical_cores", t.physical_cores},
                    {"logical_cpus", t.logical_cpus},
                    {"memory_bytes", t.memory_bytes},
                    {"numa_nodes", numa},
                    {"caches", caches},
                    {"interfaces", nics},
                    {"rdma_devices", rdma},
                    {"gpus", gpus},
                    {"gpu_links", gpu_links},
                    {"pci_devices", pci},
                    {"notes", t.notes}};
  return doc.dump(2) + "\n";
}

}  // namespace arcoll
