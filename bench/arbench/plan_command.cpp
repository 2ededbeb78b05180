#include "arbench/plan_command.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "arbench/cli.hpp"
#include "arbench/sweep.hpp"
#include "arbench/text.hpp"
#include "arcoll/cluster.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"

namespace arbench {

int run_plan_command(const PlanFlags& flags) {
  arcoll::ClusterSpec cluster;
  std::vector<std::size_t> sizes;
  std::vector<int> servers;
  try {
    for (const std::string& k : split_list(flags.ps_servers))
      servers.push_back(static_cast<int>(parse_integer("--ps-servers", k, 0, 1 << 20)));
    const int hosts = static_cast<int>(parse_integer("--hosts", flags.hosts, 1, 1 << 20));
    const std::size_t min = parse_size("-b/--minbytes", flags.min_bytes);
    const std::size_t max = parse_size("-e/--maxbytes", flags.max_bytes);
    const auto factor =
        static_cast<std::size_t>(parse_integer("-f/--stepfactor", flags.step_factor, 2, 1 << 20));
    if (min > max) throw UsageError("-b/--minbytes is larger than -e/--maxbytes");
    sizes = sweep_sizes(std::max<std::size_t>(min, 1), max, factor, 0);
    try {
      cluster = arcoll::load_cluster(flags.topology, hosts);
    } catch (const arcoll::Error& e) {
      throw UsageError("--topology: " + e.message());
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench plan: %s\n", e.what());
    return kUsageError;
  }
  const int ranks = cluster.hosts * cluster.ranks_per_host;
  print(printf_string("# arbench plan: %s\n", cluster.name.c_str()));
  print(printf_string(
      "# %d host(s) x %d rank(s) = %d ranks; within a host %s: %g us, %g GB/s; "
      "between hosts %s: %g us, %g GB/s per host (%d NIC(s)); reduce %g GB/s\n",
      cluster.hosts, cluster.ranks_per_host, ranks, cluster.intra_host.kind.c_str(),
      cluster.intra_host.latency_us, cluster.intra_host.bandwidth_gbs, cluster.network.kind.c_str(),
      cluster.network.latency_us, cluster.network.bandwidth_gbs, cluster.nics_per_host,
      cluster.intra_host.reduce_gbs));
  print(
      "# predicted time of one all-reduce (us) per algorithm; auto: the model's choice, its "
      "time and busbw (GB/s, nccl-tests' definition)\n");
  std::string header = printf_string("# %10s", "size (B)");
  for (const std::string& name : arcoll::Communicator::allreduce_algorithms())
    header += printf_string(" %12.12s", name.c_str());
  for (int k : servers)
    header +=
        printf_string(" %12.12s", (k > 0 ? "ps/" + std::to_string(k) : std::string("ps")).c_str());
  print(header + printf_string("  %-20s %10s %8s\n", "auto", "time", "busbw"));
  for (std::size_t bytes : sizes) {
    const arcoll::ClusterPlan plan = arcoll::plan_allreduce(cluster, bytes, servers);
    std::string line = printf_string("%12zu", bytes);
    for (const auto& p : plan.algorithms) line += printf_string(" %12.4g", p.seconds * 1e6);
    for (const auto& p : plan.parameter_servers) line += printf_string(" %12.4g", p.seconds * 1e6);
    const double busbw = ranks > 1 ? static_cast<double>(bytes) / plan.chosen.seconds / 1e9 * 2.0 *
                                         (ranks - 1) / ranks
                                   : 0.0;
    print(line + printf_string("  %-20s %10.4g %8.2f\n", plan.chosen.algorithm.c_str(),
                               plan.chosen.seconds * 1e6, busbw));
  }
  return 0;
}

}  // namespace arbench
