#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "arcoll/communicator.hpp"
#include "arcoll/topology.hpp"
#include "src/base/cpu_location.hpp"

namespace arcoll {
namespace {

// A placement as fixed-size bytes for the all-gather.
struct Packed {
  char host[96];
  char nic[32];
  std::int32_t numa_node, package, cpu, nic_speed_mbps, gpus;
};

std::string speed_text(int mbps) {
  return mbps > 0 ? std::to_string(mbps) + " Mb/s" : std::string("speed unknown");
}

}  // namespace

ClusterView gather_cluster_view(Communicator& comm, const HostTopology& here) {
  Packed mine{};
  std::strncpy(mine.host, comm.node_name().c_str(), sizeof mine.host - 1);
  mine.cpu = ::sched_getcpu();
  mine.numa_node = numa_node_of_cpu(mine.cpu);
  mine.package = package_of_cpu(mine.cpu);
  mine.nic_speed_mbps = -1;
  for (const NetworkInterface& n : here.interfaces)
    if (n.default_route) {
      std::strncpy(mine.nic, n.name.c_str(), sizeof mine.nic - 1);
      mine.nic_speed_mbps = n.speed_mbps;
    }
  mine.gpus = static_cast<std::int32_t>(here.gpus.size());
  std::vector<Packed> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&mine, all.data(), sizeof(Packed), DataType::u8);
  ClusterView view;
  for (int r = 0; r < comm.size(); ++r) {
    const Packed& p = all[static_cast<std::size_t>(r)];
    view.ranks.push_back(
        {r, p.host, p.numa_node, p.package, p.cpu, p.nic, p.nic_speed_mbps, p.gpus});
    if (std::find(view.hosts.begin(), view.hosts.end(), p.host) == view.hosts.end())
      view.hosts.emplace_back(p.host);
  }
  return view;
}

std::string ClusterView::link_class(int a, int b) const {
  const RankPlacement& x = ranks[static_cast<std::size_t>(a)];
  const RankPlacement& y = ranks[static_cast<std::size_t>(b)];
  if (a == b) return "self";
  if (x.host == y.host) {
    if (x.numa_node >= 0 && x.numa_node == y.numa_node) return "same host, same NUMA node";
    if (x.package >= 0 && x.package == y.package)
      return "same host, same package, across NUMA nodes";
    return "same host, across packages";
  }
  return "network (" + (x.nic.empty() ? std::string("?") : x.nic) + " " +
         speed_text(x.nic_speed_mbps) + " -> " + (y.nic.empty() ? std::string("?") : y.nic) + " " +
         speed_text(y.nic_speed_mbps) + ")";
}

std::string cluster_view_text(const ClusterView& view) {
  std::string out = "cluster: " + std::to_string(view.ranks.size()) + " ranks on " +
                    std::to_string(view.hosts.size()) + " host(s)\n";
  for (const std::string& host : view.hosts) {
    out += "  host " + host + ":";
    for (const RankPlacement& r : view.ranks)
      if (r.host == host)
        out += " rank " + std::to_string(r.rank) + " (CPU " + std::to_string(r.cpu) + ", NUMA " +
               std::to_string(r.numa_node) + ")";
    out += "\n";
  }
  // Each class once, with how many ordered pairs fall in it.
  std::map<std::string, int> classes;
  for (std::size_t a = 0; a < view.ranks.size(); ++a)
    for (std::size_t b = 0; b < view.ranks.size(); ++b)
      if (a != b) ++classes[view.link_class(static_cast<int>(a), static_cast<int>(b))];
  out += "  links between ranks:\n";
  for (const auto& [name, pairs] : classes)
    out += "    " + name + ": " + std::to_string(pairs) + " ordered pair(s)\n";
  return out;
}

std::string cluster_view_dot(const ClusterView& view) {
  std::string out = "graph cluster {\n  node [shape=box, fontname=\"Helvetica\"];\n";
  out += "  network [shape=ellipse, label=\"network\"];\n";
  for (std::size_t h = 0; h < view.hosts.size(); ++h) {
    const std::string& host = view.hosts[h];
    const std::string id = "h" + std::to_string(h);
    out += "  subgraph cluster_" + id + " {\n    label=\"" + host + "\";\n";
    const RankPlacement* any = nullptr;
    for (const RankPlacement& r : view.ranks)
      if (r.host == host) {
        any = &r;
        out += "    r" + std::to_string(r.rank) + " [label=\"rank " + std::to_string(r.rank) +
               "\\nNUMA " + std::to_string(r.numa_node) + ", CPU " + std::to_string(r.cpu) +
               "\"];\n";
      }
    out += "    " + id + "_nic [shape=hexagon, label=\"" +
           (any && !any->nic.empty() ? any->nic : std::string("no NIC")) + "\\n" +
           speed_text(any ? any->nic_speed_mbps : -1) + "\"];\n";
    if (any && any->gpus > 0)
      out += "    " + id + "_gpus [shape=component, label=\"" + std::to_string(any->gpus) +
             " GPU(s)\"];\n";
    for (const RankPlacement& r : view.ranks)
      if (r.host == host)
        out += "    r" + std::to_string(r.rank) + " -- " + id + "_nic [style=dotted];\n";
    out += "  }\n  " + id + "_nic -- network;\n";
  }
  return out + "}\n";
}

}  // namespace arcoll
