#include "topology/sources.hpp"

#if ARCOLL_HAVE_HWLOC
#include <hwloc.h>

#include <cstdio>
#include <memory>
#endif

namespace arcoll {

std::string pci_locality(const PciDevice& a, const PciDevice& b) {
  if (a.root == b.root && !a.root.empty()) {
    if (!a.bridges.empty() && !b.bridges.empty() && a.bridges.front() == b.bridges.front())
      return "same PCI switch";
    return "same root complex";
  }
  if (a.numa_node >= 0 && a.numa_node == b.numa_node) return "same NUMA node";
  return "across NUMA nodes";
}

namespace discovery {

#if ARCOLL_HAVE_HWLOC
namespace {

std::string bus_id(unsigned domain, unsigned bus, unsigned dev, unsigned func) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", domain, bus, dev, func);
  return text;
}

// The PCI class names that matter here (base class and subclass from the class code).
std::string class_name(unsigned class_id) {
  switch (class_id) {
    case 0x0200:
      return "Ethernet";
    case 0x0207:
      return "InfiniBand";
    case 0x0300:
      return "VGA";
    case 0x0302:
      return "3D";
    case 0x0108:
      return "NVMe";
    case 0x1200:
      return "Accelerator";
  }
  switch (class_id >> 8) {
    case 0x01:
      return "Storage";
    case 0x02:
      return "Network";
    case 0x03:
      return "Display";
    case 0x06:
      return "Bridge";
    case 0x12:
      return "Accelerator";
  }
  char text[16];
  std::snprintf(text, sizeof text, "class %04x", class_id);
  return text;
}

}  // namespace

void pci_tree(HostTopology& t) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) {
    t.notes.push_back("hwloc could not start: no PCI tree");
    return;
  }
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> topology(raw, hwloc_topology_destroy);
  // Without this hwloc keeps no I/O objects at all.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(raw) != 0) {
    t.notes.push_back("hwloc could not load this host's topology: no PCI tree");
    return;
  }
  for (hwloc_obj_t obj = hwloc_get_next_pcidev(raw, nullptr); obj != nullptr;
       obj = hwloc_get_next_pcidev(raw, obj)) {
    const auto& pci = obj->attr->pcidev;
    PciDevice d;
    d.bus_id = bus_id(pci.domain, pci.bus, pci.dev, pci.func);
    d.kind = class_name(pci.class_id);
    d.link_gbs = pci.linkspeed;
    for (hwloc_obj_t os = obj->io_first_child; os != nullptr; os = os->next_sibling)
      if (os->type == HWLOC_OBJ_OS_DEVICE && os->name != nullptr)
        d.os_devices.emplace_back(os->name);
    // Bridges above it up to the host bridge; the one right below the host bridge is the
    // switch (or root port) the device hangs from.
    for (hwloc_obj_t up = obj->parent; up != nullptr && up->type == HWLOC_OBJ_BRIDGE;
         up = up->parent) {
      const auto& bridge = up->attr->bridge;
      char root[16];
      std::snprintf(root, sizeof root, "%04x:%02x",
                    static_cast<unsigned>(bridge.downstream.pci.domain),
                    static_cast<unsigned>(bridge.downstream.pci.secondary_bus));
      if (bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) {
        d.root = root;
        break;
      }
      const auto& u = bridge.upstream.pci;
      d.bridges.insert(d.bridges.begin(), bus_id(u.domain, u.bus, u.dev, u.func));
    }
    if (hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(raw, obj);
        cpu_side != nullptr && cpu_side->nodeset != nullptr &&
        hwloc_bitmap_weight(cpu_side->nodeset) == 1)
      d.numa_node = hwloc_bitmap_first(cpu_side->nodeset);
    t.pci_devices.push_back(std::move(d));
  }
  if (t.pci_devices.empty())
    t.notes.push_back("hwloc found no PCI device (a container without /sys/bus/pci?): no PCI tree");
}

#else

void pci_tree(HostTopology& t) {
  t.notes.push_back(
      "hwloc is not in this build (install libhwloc-dev and reconfigure): no PCI tree");
}

#endif

}  // namespace discovery
}  // namespace arcoll
