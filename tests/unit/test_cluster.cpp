// Cluster files for planning: the shipped examples load, malformed files fail naming the field,
// and the predictions on a described cluster follow the cost model's formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "arcoll/cluster.hpp"
#include "arcoll/error.hpp"
#include "arcoll/topology.hpp"
#include "transports/transport.hpp"

namespace arcoll {
namespace {

const std::string kExamples = std::string(ARCOLL_SOURCE_DIR) + "/examples/topologies/";

TEST(ClusterFile, ShippedExamplesLoad) {
  const ClusterSpec dgx = load_cluster(kExamples + "dgx-class-4x8-nvlink-ib.json");
  EXPECT_EQ(dgx.hosts, 4);
  EXPECT_EQ(dgx.ranks_per_host, 8);
  EXPECT_EQ(dgx.intra_host.kind, "nvlink");
  EXPECT_EQ(dgx.nics_per_host, 8);
  EXPECT_DOUBLE_EQ(dgx.network.bandwidth_gbs, 8 * 400 / 8.0);  // 8 NICs of 400 Gb/s
  EXPECT_EQ(load_cluster(kExamples + "pcie-4gpu-25gbe.json").network.bandwidth_gbs, 25 / 8.0);
  EXPECT_EQ(load_cluster(kExamples + "cpu-cluster-10gbe.json").hosts, 8);
}

// The message of the ConfigurationError that `text` raises.
std::string error_of(const std::string& text) {
  try {
    parse_cluster(text, "test.json");
  } catch (const ConfigurationError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ClusterFile, MalformedFilesNameTheField) {
  const std::string good_links =
      R"("intra_host": {"latency_us": 2, "bandwidth_gbs": 10, "reduce_gbs": 10},
         "network": {"latency_us": 5, "nics": 2, "nic_gbps": 100, "reduce_gbs": 10})";
  auto with = [&](const std::string& fields) {
    return R"({"schema": "arcoll.cluster/1", )" + fields + "}";
  };
  EXPECT_NO_THROW(parse_cluster(with(R"("hosts": 2, "ranks_per_host": 4, )" + good_links), "t"));
  EXPECT_NE(
      error_of(with(R"("ranks_per_host": 4, )" + good_links)).find("field 'hosts' is missing"),
      std::string::npos);
  EXPECT_NE(error_of(with(R"("hosts": 0, "ranks_per_host": 4, )" + good_links)).find("'hosts'"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("hosts": 2, "ranks_per_host": "four", )" + good_links))
                .find("'ranks_per_host'"),
            std::string::npos);
  std::string negative = good_links;
  negative.replace(negative.find("\"bandwidth_gbs\": 10"), 19, "\"bandwidth_gbs\": -3");
  EXPECT_NE(error_of(with(R"("hosts": 2, "ranks_per_host": 4, )" + negative))
                .find("'intra_host.bandwidth_gbs' must be a positive number"),
            std::string::npos);
  std::string no_latency = good_links;
  no_latency.replace(no_latency.find("\"latency_us\": 5, "), 17, "");
  EXPECT_NE(error_of(with(R"("hosts": 2, "ranks_per_host": 4, )" + no_latency))
                .find("'network.latency_us' is missing"),
            std::string::npos);
  std::string zero_nics = good_links;
  zero_nics.replace(zero_nics.find("\"nics\": 2"), 9, "\"nics\": 0");
  EXPECT_NE(
      error_of(with(R"("hosts": 2, "ranks_per_host": 4, )" + zero_nics)).find("'network.nics'"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"schema": "something/else"})").find("'schema'"), std::string::npos);
  EXPECT_NE(error_of(R"({"schema": "arcoll.cluster/1", "hosts": )").find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of("[1, 2]").find("top level"), std::string::npos);
  // A host saved by arbench topo --json whose NICs report no speed cannot say what the network is.
  EXPECT_NE(error_of(R"({"schema": "arcoll.topology/1", "logical_cpus": 4, "interfaces": [
                         {"name": "eth0", "default_route": true, "speed_mbps": -1}]})")
                .find("'interfaces'"),
            std::string::npos);
  // A saved host whose optional parts have the wrong type.
  EXPECT_NE(error_of(R"({"schema": "arcoll.topology/1", "logical_cpus": 4, "interfaces": [],
                         "rdma_devices": [{"ports": [{"state": "ACTIVE", "gbps": "fast"}]}]})")
                .find("wrong type"),
            std::string::npos);
  EXPECT_THROW(load_cluster(kExamples + "no-such-file.json"), ConfigurationError);
}

TEST(ClusterFile, LeftOutFiguresComeFromTheKind) {
  const ClusterSpec pcie = load_cluster(kExamples + "pcie-4gpu-25gbe.json");
  EXPECT_DOUBLE_EQ(pcie.intra_host.latency_us, default_link("pcie").latency_us);
  EXPECT_DOUBLE_EQ(pcie.intra_host.bandwidth_gbs, default_link("pcie").bandwidth_gbs);
  EXPECT_DOUBLE_EQ(pcie.network.latency_us, default_link("ethernet").latency_us);
  // The network reduces on the same GPUs as the host.
  EXPECT_DOUBLE_EQ(pcie.network.reduce_gbs, default_link("pcie").reduce_gbs);
  // A kind without defaults, or a network without its bandwidth, still names what is missing.
  EXPECT_NE(error_of(R"({"schema": "arcoll.cluster/1", "hosts": 2, "ranks_per_host": 2,
                         "intra_host": {"kind": "carrier-pigeon"}, "network": {"kind": "ethernet", "nic_gbps": 1}})")
                .find("'intra_host.latency_us' is missing"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"schema": "arcoll.cluster/1", "hosts": 2, "ranks_per_host": 2,
                         "intra_host": {"kind": "nvlink"}, "network": {"kind": "infiniband"}})")
                .find("'network.bandwidth_gbs' is missing"),
            std::string::npos);
}

TEST(ClusterFile, SavedGpuHostUsesItsNvlinksAndRdmaPorts) {
  const ClusterSpec c = parse_cluster(
      R"({"schema": "arcoll.topology/1", "hostname": "gpu", "logical_cpus": 64,
          "gpus": [{"pci_bus_id": "0000:17:00.0"}, {"pci_bus_id": "0000:2a:00.0"}],
          "gpu_links": [{"a": 0, "b": 1, "p2p": true, "nvlinks": 12}, {"a": 1, "b": 0, "p2p": true, "nvlinks": 12}],
          "rdma_devices": [{"name": "mlx5_0", "ports": [{"port": 1, "state": "ACTIVE", "link_layer": "InfiniBand", "gbps": 400}]},
                           {"name": "mlx5_1", "ports": [{"port": 1, "state": "DOWN", "link_layer": "InfiniBand", "gbps": 400}]},
                           {"name": "mlx5_2", "ports": [{"port": 1, "state": "ACTIVE", "link_layer": "InfiniBand", "gbps": 400}]}],
          "interfaces": []})",
      "saved.json", 2);
  EXPECT_EQ(c.ranks_per_host, 2);
  EXPECT_EQ(c.intra_host.kind, "nvlink");
  EXPECT_EQ(c.network.kind, "infiniband");
  EXPECT_EQ(c.nics_per_host, 2);  // the active ports only
  EXPECT_DOUBLE_EQ(c.network.bandwidth_gbs, 2 * 400 / 8.0);
}

TEST(PciLocality, SwitchThenRootComplexThenNuma) {
  auto device = [](std::string root, std::vector<std::string> bridges, int numa) {
    PciDevice d;
    d.root = std::move(root);
    d.bridges = std::move(bridges);
    d.numa_node = numa;
    return d;
  };
  const PciDevice gpu = device("0000:00", {"0000:16:00.0", "0000:17:01.0"}, 0);
  EXPECT_EQ(pci_locality(gpu, device("0000:00", {"0000:16:00.0", "0000:17:02.0"}, 0)),
            "same PCI switch");
  EXPECT_EQ(pci_locality(gpu, device("0000:00", {"0000:30:00.0"}, 0)), "same root complex");
  EXPECT_EQ(pci_locality(gpu, device("0000:40", {}, 0)), "same NUMA node");
  EXPECT_EQ(pci_locality(gpu, device("0000:80", {}, 1)), "across NUMA nodes");
}

// Without GPUs, the ranks of a saved host talk over the transport this build prefers within a
// host, at its built-in costs.
TEST(ClusterFile, SavedHostBecomesHostsOfItsTransportWithinOnItsNic) {
  const ClusterSpec c = parse_cluster(
      R"({"schema": "arcoll.topology/1", "hostname": "node", "logical_cpus": 16, "interfaces": [
          {"name": "lo", "speed_mbps": -1}, {"name": "eth0", "default_route": true, "speed_mbps": 25000}]})",
      "saved.json", 3);
  EXPECT_EQ(c.hosts, 3);
  EXPECT_EQ(c.ranks_per_host, 16);
  const TransportInfo& within = transport_for(true);
  EXPECT_EQ(c.intra_host.kind, within.name);
  EXPECT_DOUBLE_EQ(c.intra_host.bandwidth_gbs, within.default_costs.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(c.network.bandwidth_gbs, 25.0 / 8);
}

// Ring and tree on the DGX-class example against the formulas by hand: 32 ranks on 4 hosts;
// flat algorithms cross the network (3 us, 400 GB/s per host, reduce 1500 GB/s).
TEST(ClusterPlan, RingAndTreeFollowTheFormulas) {
  const ClusterSpec dgx = load_cluster(kExamples + "dgx-class-4x8-nvlink-ib.json");
  const double alpha = 3e-6, beta = 1 / 400e9, gamma = 1 / 1500e9, p = 32;
  const std::size_t n = 16 << 20;
  auto predicted = [&](const std::string& name) {
    for (const auto& a : plan_allreduce(dgx, n).algorithms)
      if (a.algorithm == name) return a.seconds;
    return -1.0;
  };
  // Ring: 2(p-1) steps of one 512 KiB chunk (16 MiB / 32 segments).
  EXPECT_NEAR(predicted("ring"),
              2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma, 1e-12);
  // Tree: each half (8 MiB) in m chunks up and down a tree of height log2 32 = 5: m + 9 steps,
  // each moving 4 chunks over the host link shared by its 8 ranks and reducing 2; the model
  // takes the best chunk.
  double best = 1e9;
  for (double chunk : {64.0 * 1024, 256.0 * 1024, 512.0 * 1024, 1024.0 * 1024, 4096.0 * 1024}) {
    const double m = std::ceil(n / 2.0 / chunk), c = n / 2.0 / m;
    best = std::min(best, (m + 2 * 5 - 1) * (alpha + 4 * c * beta * 8 + 2 * c * gamma));
  }
  EXPECT_NEAR(predicted("tree"), best, 1e-12);
  // Auto takes the least of them all.
  const ClusterPlan plan = plan_allreduce(dgx, n);
  for (const auto& a : plan.algorithms) EXPECT_LE(plan.chosen.seconds, a.seconds * (1 + 1e-9));
}

}  // namespace
}  // namespace arcoll
