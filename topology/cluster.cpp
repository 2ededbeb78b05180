#include "arcoll/cluster.hpp"

#include "algorithms/cost_model.hpp"
#include "arcoll/error.hpp"
#include "arcoll/parameter_server.hpp"
#include "src/base/json_file.hpp"
#include "transports/transport.hpp"

namespace arcoll {
namespace {

using json_file::bad;
using json_file::Json;
using json_file::member;
using json_file::positive;
using Source = json_file::Source;

int count(const Json& object, const Source& source, const char* key, int max) {
  const Json& value = member(object, source, "", key);
  if (!value.is_number_integer() || value.get<long long>() < 1 || value.get<long long>() > max)
    bad(source, key, "must be an integer from 1 to " + std::to_string(max));
  return value.get<int>();
}

// A figure of link `key`: from the file, else the default of its kind, else the file is at
// fault for leaving it out.
double figure(const Json& link_json, const Source& source, const char* key, const char* field,
              double fallback) {
  if (!link_json.contains(field) && fallback > 0) return fallback;
  return positive(link_json, source, key, field);
}

LinkSpec link(const Json& object, const Source& source, const char* key, double reduce_fallback) {
  const Json& j = member(object, source, "", key);
  if (!j.is_object()) bad(source, key, "must be an object");
  LinkSpec l;
  if (j.contains("kind")) {
    if (!j["kind"].is_string()) bad(source, std::string(key) + ".kind", "must be a string");
    l.kind = j["kind"].get<std::string>();
  }
  const LinkSpec d = default_link(l.kind);
  l.latency_us = figure(j, source, key, "latency_us", d.latency_us);
  // The network may be given as NICs and their line rate instead of a total.
  l.bandwidth_gbs = j.contains("nic_gbps")
                        ? positive(j, source, key, "nic_gbps") / 8
                        : figure(j, source, key, "bandwidth_gbs", d.bandwidth_gbs);
  l.reduce_gbs =
      figure(j, source, key, "reduce_gbs", d.reduce_gbs > 0 ? d.reduce_gbs : reduce_fallback);
  return l;
}

// A host saved by `arbench topo --json`. With GPUs: a rank per GPU, NVLink between them when
// NVML saw any, else PCIe. Without: a rank per logical CPU on shared memory. Between hosts:
// its active RDMA ports when it has any, else its default-route NIC.
ClusterSpec from_saved_host(const Json& j, const Source& source, int hosts) {
  ClusterSpec c;
  const Json& cpus = member(j, source, "", "logical_cpus");
  if (!cpus.is_number_integer() || cpus.get<int>() < 1)
    bad(source, "logical_cpus", "must be a positive integer");
  c.ranks_per_host = cpus.get<int>();
  c.hosts = hosts;
  c.name = (j.contains("hostname") && j["hostname"].is_string() ? j["hostname"].get<std::string>()
                                                                : std::string("saved host")) +
           " x " + std::to_string(hosts);
  c.intra_host = default_link(transport_for(true).name);
  const Json gpus = j.value("gpus", Json::array());
  if (gpus.is_array() && !gpus.empty()) {
    c.ranks_per_host = static_cast<int>(gpus.size());
    bool nvlink = false;
    for (const Json& l : j.value("gpu_links", Json::array()))
      nvlink = nvlink || (l.is_object() && l.value("nvlinks", 0) > 0);
    c.intra_host = default_link(nvlink ? "nvlink" : "pcie");
  }
  int ports = 0;
  double port_gbps = 0;
  std::string layer;
  for (const Json& device : j.value("rdma_devices", Json::array()))
    for (const Json& port :
         device.is_object() ? device.value("ports", Json::array()) : Json::array())
      if (port.is_object() && port.value("state", "") == "ACTIVE" && port.value("gbps", 0.0) > 0) {
        ++ports;
        port_gbps = port["gbps"].get<double>();
        layer = port.value("link_layer", "");
      }
  if (ports > 0) {
    c.network = default_link(layer == "Ethernet" ? "roce" : "infiniband");
    c.nics_per_host = ports;
    c.network.bandwidth_gbs = ports * port_gbps / 8;
  } else {
    double gbps = 0;
    for (const Json& nic : member(j, source, "", "interfaces"))
      if (nic.is_object() && nic.value("default_route", false) && nic.value("speed_mbps", -1) > 0)
        gbps = nic["speed_mbps"].get<int>() / 1000.0;
    if (gbps <= 0)
      bad(source, "interfaces",
          "has no default-route interface with a known speed_mbps (and no active RDMA port): "
          "write the cluster format (examples/topologies/) to say what the network is");
    c.network = default_link("ethernet");
    c.network.bandwidth_gbs = gbps / 8;
  }
  c.network.reduce_gbs = c.intra_host.reduce_gbs;
  return c;
}

}  // namespace

LinkSpec default_link(const std::string& kind) {
  // A kind that names one of our transports has its built-in costs.
  if (const TransportInfo* t = TransportRegistry::instance().find(kind))
    return {kind, t->default_costs.latency_us, t->default_costs.bandwidth_gbs,
            t->default_costs.reduce_gbs};
  // Typical figures of the other classes, for files that give only the kind: latency of a
  // small message, bandwidth one rank reaches, reduction rate of the devices at its ends (GPUs
  // for NVLink and PCIe). Network bandwidth depends on the NICs: no default.
  if (kind == "nvlink") return {kind, 2.0, 370, 1500};  // H100-class NVSwitch, NCCL busbw
  if (kind == "pcie") return {kind, 5.0, 20, 800};      // Gen4 x16 between GPUs
  if (kind == "infiniband") return {kind, 3.0, 0, 0};
  if (kind == "roce") return {kind, 5.0, 0, 0};
  if (kind == "ethernet") return {kind, 20.0, 0, 0};  // kernel TCP through a switch
  return {kind, 0, 0, 0};
}

ClusterSpec parse_cluster(const std::string& text, const std::string& name, int hosts) {
  const Source source{"topology file", name};
  const Json j = json_file::parse_object(text, source);
  const Json& schema = member(j, source, "", "schema");
  if (schema == "arcoll.topology/1") {
    // Its optional parts are read leniently (json::value); one of the wrong type still names
    // the file rather than escaping as a library exception.
    try {
      return from_saved_host(j, source, hosts);
    } catch (const nlohmann::json::type_error& e) {
      bad(source, "gpus, gpu_links or rdma_devices",
          std::string("has a value of the wrong type (") + e.what() + ")");
    }
  }
  if (schema != "arcoll.cluster/1")
    bad(source, "schema", "must be \"arcoll.cluster/1\" (or a host saved by arbench topo --json)");
  ClusterSpec c;
  if (j.contains("name") && j["name"].is_string()) c.name = j["name"].get<std::string>();
  c.hosts = count(j, source, "hosts", 1 << 20);
  c.ranks_per_host = count(j, source, "ranks_per_host", 1 << 16);
  c.intra_host = link(j, source, "intra_host", 0);
  // The network's reduction runs on the same devices as the host's.
  c.network = link(j, source, "network", c.intra_host.reduce_gbs);
  if (j["network"].contains("nics")) {
    const Json& nics = j["network"]["nics"];
    if (!nics.is_number_integer() || nics.get<int>() < 1 || nics.get<int>() > 1024)
      bad(source, "network.nics", "must be an integer from 1 to 1024");
    c.nics_per_host = nics.get<int>();
    if (j["network"].contains("nic_gbps")) c.network.bandwidth_gbs *= c.nics_per_host;
  }
  return c;
}

ClusterSpec load_cluster(const std::string& path, int hosts) {
  return parse_cluster(json_file::read({"topology file", path}), path, hosts);
}

ClusterPlan plan_allreduce(const ClusterSpec& cluster, std::size_t bytes,
                           const std::vector<int>& parameter_servers) {
  auto cost = [](const LinkSpec& l) {
    return LinkCost{l.latency_us * 1e-6, 1.0 / (l.bandwidth_gbs * 1e9), 1.0 / (l.reduce_gbs * 1e9)};
  };
  Layout layout;
  layout.ranks = cluster.hosts * cluster.ranks_per_host;
  layout.hosts = cluster.hosts;
  layout.ranks_per_host = cluster.ranks_per_host;
  layout.intra = cost(cluster.intra_host);
  layout.inter = cost(cluster.network);
  if (cluster.hosts == 1) layout.inter = layout.intra;
  ClusterPlan plan;
  const auto b = static_cast<double>(bytes);
  for (const std::string& name : Communicator::allreduce_algorithms()) {
    const Plan p = cost::predict(name, layout, b);
    plan.algorithms.push_back({p.algorithm, p.chunk_bytes, p.seconds});
  }
  const Plan best = cost::best(layout, b);
  plan.chosen = {best.algorithm, best.chunk_bytes, best.seconds};
  for (int servers : parameter_servers)
    plan.parameter_servers.push_back(
        {servers > 0 ? "ps/" + std::to_string(servers) : "ps", 0,
         cost::parameter_server_seconds(layout, b, servers, ParameterServerOptions{}.piece_bytes)});
  return plan;
}

}  // namespace arcoll
