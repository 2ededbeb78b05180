#include "arbench/topo_command.hpp"

#include <nlohmann/json.hpp>
#include <optional>

#include "arbench/files.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/topology.hpp"

namespace arbench {

int run_topo_command(const TopoFlags& flags) {
  const std::string& json = flags.json;
  const std::string& dot = flags.dot;
  return run_tool(
      "topo", flags.tool, 1, 1,
      [&]() -> std::optional<std::string> {
        if (!json.empty())
          if (auto error = check_writable("--json", json)) return error;
        if (!dot.empty()) return check_writable("--dot", dot);
        return std::nullopt;
      },
      [&](arcoll::Communicator& comm) {
        const arcoll::HostTopology host = arcoll::discover_host_topology();
        const arcoll::ClusterView view = arcoll::gather_cluster_view(comm, host);
        if (comm.rank() != 0) return 0;
        print(arcoll::topology_text(host));
        if (comm.size() > 1) print(arcoll::cluster_view_text(view));
        if (!json.empty()) {
          auto document = nlohmann::json::parse(arcoll::topology_json(host));
          nlohmann::json ranks = nlohmann::json::array();
          for (const arcoll::RankPlacement& r : view.ranks)
            ranks.push_back({{"rank", r.rank},
                             {"host", r.host},
                             {"cpu", r.cpu},
                             {"numa_node", r.numa_node},
                             {"nic", r.nic},
                             {"nic_speed_mbps", r.nic_speed_mbps},
                             {"gpus", r.gpus}});
          document["cluster"] = {{"hosts", view.hosts}, {"ranks", ranks}};
          write_atomically(json, document.dump(2) + "\n");
        }
        if (!dot.empty()) write_atomically(dot, arcoll::cluster_view_dot(view));
        return 0;
      });
}

}  // namespace arbench
