#include "topology/sources.hpp"

#if ARCOLL_HAVE_IBVERBS
#include <infiniband/verbs.h>

#include <cstdio>
#include <fstream>
#endif

namespace arcoll::discovery {

#if ARCOLL_HAVE_IBVERBS
namespace {

struct LaneSpeed {
  int code;
  double gbps;  // per lane, as the link's data rate
  const char* name;
};
// ibv_port_attr::active_speed codes.
constexpr LaneSpeed kLaneSpeeds[] = {{1, 2.5, "SDR"},  {2, 5, "DDR"},     {4, 10, "QDR"},
                                     {8, 10, "FDR10"}, {16, 14, "FDR"},   {32, 25, "EDR"},
                                     {64, 50, "HDR"},  {128, 100, "NDR"}, {256, 200, "XDR"}};

// ibv_port_attr::active_width codes -> lanes.
int lanes(int width) {
  switch (width) {
    case 1:
      return 1;
    case 2:
      return 4;
    case 4:
      return 8;
    case 8:
      return 12;
    case 16:
      return 2;
  }
  return 0;
}

RdmaPort port_of(ibv_context* context, int number) {
  RdmaPort p;
  p.port = number;
  ibv_port_attr attr{};
  if (ibv_query_port(context, static_cast<std::uint8_t>(number), &attr) != 0) {
    p.state = "?";
    p.link_layer = "?";
    p.rate = "not readable";
    return p;
  }
  p.state = ibv_port_state_str(attr.state);
  // "PORT_ACTIVE" -> "ACTIVE", as sysfs says it.
  if (p.state.rfind("PORT_", 0) == 0) p.state = p.state.substr(5);
  p.link_layer = attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  const int n = lanes(attr.active_width);
  for (const LaneSpeed& s : kLaneSpeeds)
    if (s.code == attr.active_speed && n > 0) {
      p.gbps = s.gbps * n;
      char rate[64];
      std::snprintf(rate, sizeof rate, "%g Gb/sec (%dX %s)", p.gbps, n, s.name);
      p.rate = rate;
    }
  if (p.rate.empty())
    p.rate = "speed code " + std::to_string(attr.active_speed) + ", width code " +
             std::to_string(attr.active_width);
  return p;
}

}  // namespace

bool rdma_ports(HostTopology& t) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    t.notes.push_back(
        "no RDMA device found (libibverbs lists none: no kernel RDMA support or no "
        "device): no InfiniBand or RoCE; TCP carries traffic between hosts");
    return true;
  }
  for (int i = 0; i < count; ++i) {
    RdmaDevice d;
    d.name = ibv_get_device_name(list[i]);
    std::ifstream numa("/sys/class/infiniband/" + d.name + "/device/numa_node");
    if (!(numa >> d.numa_node)) d.numa_node = -1;
    if (ibv_context* context = ibv_open_device(list[i])) {
      ibv_device_attr attr{};
      if (ibv_query_device(context, &attr) == 0)
        for (int port = 1; port <= attr.phys_port_cnt; ++port)
          d.ports.push_back(port_of(context, port));
      ibv_close_device(context);
    } else {
      t.notes.push_back("RDMA device " + d.name +
                        " could not be opened (permissions?): ports unknown");
    }
    t.rdma_devices.push_back(std::move(d));
  }
  ibv_free_device_list(list);
  if (t.rdma_devices.empty())
    t.notes.push_back(
        "no RDMA device found (libibverbs lists none): no InfiniBand or RoCE; TCP "
        "carries traffic between hosts");
  return true;
}

#else

bool rdma_ports(HostTopology& t) {
  t.notes.push_back(
      "libibverbs is not in this build (install libibverbs-dev and reconfigure): "
      "RDMA ports read from sysfs");
  return false;
}

#endif

}  // namespace arcoll::discovery
