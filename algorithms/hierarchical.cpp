// Hierarchical all-reduce: reduce-scatter among the ranks of each host (shared memory), then
// each shard all-reduced across hosts among the ranks with the same local index (each over
// its own share of the host's link, with the inter-host algorithm the cost model predicts
// fastest), then all-gather within the host. With the ring across hosts this is the 2D-torus
// all-reduce (rows, then columns, then rows), registered as `torus2d`.
//
// When hosts hold different numbers of ranks the shards do not line up across hosts: the
// host all-reduces, one leader per host all-reduces across hosts, and the host broadcasts.
#include <algorithm>

#include "algorithms/cost_model.hpp"
#include "algorithms/group.hpp"
#include "algorithms/ring.hpp"

namespace arcoll {
namespace {

struct Hosts {
  std::vector<int> local;           // ranks of this host, in rank order
  std::vector<int> same_index;      // on every host, its rank with this rank's local index
  bool uniform = true;              // every host holds as many ranks
  int count = 0;
};

Hosts hosts_of(const PointToPoint& p2p) {
  std::vector<std::vector<int>> by_host;
  for (int r = 0; r < p2p.size(); ++r) {
    const auto host = static_cast<std::size_t>(p2p.node_of(r));
    if (by_host.size() <= host) by_host.resize(host + 1);
    by_host[host].push_back(r);
  }
  Hosts h;
  h.count = static_cast<int>(by_host.size());
  h.local = by_host[static_cast<std::size_t>(p2p.node_of(p2p.rank()))];
  const auto index = static_cast<std::size_t>(
      std::find(h.local.begin(), h.local.end(), p2p.rank()) - h.local.begin());
  for (const auto& ranks : by_host) {
    h.uniform = h.uniform && ranks.size() == h.local.size();
    if (index < ranks.size()) h.same_index.push_back(ranks[index]);
  }
  return h;
}

// The layout of one rank per host, the host link shared by `sharers` ranks at once.
Layout across_hosts(const Layout& l, int sharers) {
  Layout inner = l;
  inner.ranks = inner.hosts = l.hosts;
  inner.ranks_per_host = 1;
  inner.inter.beta *= sharers;
  inner.intra = inner.inter;
  return inner;
}

// The plan for what runs across hosts: `forced`, or the model's best flat algorithm.
Plan plan_across(const Layout& inner, double bytes, const std::string& forced) {
  return forced.empty() ? cost::best(inner, bytes, /*flat_only=*/true)
                        : cost::predict(forced, inner, bytes);
}

void run_plan(GroupView& group, const Plan& plan, char* data, std::size_t count,
              const CollectiveArgs& a) {
  group.set_chunk_bytes(plan.chunk_bytes);
  CollectiveArgs args = a;
  args.send = args.recv = data;
  args.count = count;
  (*find_collective(plan.algorithm, Collective::allreduce))(group, args);
}

void hierarchical_allreduce(PointToPoint& p2p, const CollectiveArgs& a, const std::string& forced) {
  const std::size_t elem = size_of(a.type);
  const Layout& layout = p2p.layout();
  const Hosts hosts = hosts_of(p2p);
  const auto local = static_cast<int>(hosts.local.size());
  char* out = static_cast<char*>(a.recv);
  if (hosts.count == 1 || p2p.size() == hosts.count) {  // one level only: a flat algorithm
    GroupView all(p2p, [&] {
      std::vector<int> ranks(static_cast<std::size_t>(p2p.size()));
      for (int r = 0; r < p2p.size(); ++r) ranks[static_cast<std::size_t>(r)] = r;
      return ranks;
    }());
    p2p.copy(out, a.send, a.count * elem);
    run_plan(all, plan_across(layout, static_cast<double>(a.count * elem), forced), out, a.count, a);
    return;
  }
  GroupView host(p2p, hosts.local);
  if (hosts.uniform) {
    const ring::Segments shards = ring::Segments::balanced(a.count, local);
    ring::reduce_scatter(host, shards, a.type, a.op, static_cast<const char*>(a.send),
                         [&](int s) { return out + shards.begin(s) * elem; })
        ->run();
    const int mine = host.rank();
    GroupView across(p2p, hosts.same_index);
    const std::size_t shard = shards.count(mine);
    run_plan(across,
             plan_across(across_hosts(layout, local), static_cast<double>(shard * elem), forced),
             out + shards.begin(mine) * elem, shard, a);
    ring::allgather(host, shards, a.type, out)->run();
    return;
  }
  ring::allreduce(host, a.count, a.type, a.op, static_cast<const char*>(a.send), out)->run();
  if (host.rank() == 0) {
    GroupView leaders(p2p, hosts.same_index);
    run_plan(leaders, plan_across(across_hosts(layout, 1), static_cast<double>(a.count * elem), forced),
             out, a.count, a);
  }
  CollectiveArgs broadcast = a;
  broadcast.send = broadcast.recv = out;
  broadcast.root = 0;
  (*find_collective("ring", Collective::broadcast))(host, broadcast);
}

double hierarchical_cost(const CostQuery& q, const std::string& forced) {
  const Layout& l = q.layout;
  const int local = l.ranks_per_host;
  if (l.hosts == 1 || l.ranks == l.hosts)
    return plan_across(l, q.bytes, forced).seconds;
  if (local == 0) {  // uneven hosts: host all-reduce, leaders, host broadcast
    const int largest = (l.ranks + l.hosts - 1) / l.hosts;
    return ring::allreduce_cost(largest, q.bytes, l.intra, l.chunk_bytes) +
           plan_across(across_hosts(l, 1), q.bytes, forced).seconds +
           (largest - 1) * l.intra.alpha + q.bytes * l.intra.beta;
  }
  const double L = local;
  const double share = (L - 1) / L * q.bytes;
  return 2 * (L - 1) * l.intra.alpha + 2 * share * l.intra.beta + share * l.intra.gamma +
         plan_across(across_hosts(l, local), q.bytes / L, forced).seconds;
}

const AlgorithmRegistrar kHierarchical{AlgorithmInfo{
    "hierarchical",
    "reduce-scatter within each host, all-reduce of each shard across hosts (algorithm chosen "
    "by the cost model), all-gather within the host",
    {{Collective::allreduce,
      [](PointToPoint& p2p, const CollectiveArgs& a) { hierarchical_allreduce(p2p, a, ""); }}},
    {{Collective::allreduce, [](const CostQuery& q) { return hierarchical_cost(q, ""); }}},
    /*chunked=*/false,
    /*composite=*/true}};

const AlgorithmRegistrar kTorus2d{AlgorithmInfo{
    "torus2d",
    "2D-torus: ring reduce-scatter within hosts (rows), ring all-reduce across hosts (columns), "
    "ring all-gather within hosts",
    {{Collective::allreduce,
      [](PointToPoint& p2p, const CollectiveArgs& a) { hierarchical_allreduce(p2p, a, "ring"); }}},
    {{Collective::allreduce, [](const CostQuery& q) { return hierarchical_cost(q, "ring"); }}},
    /*chunked=*/false,
    /*composite=*/true}};

}  // namespace
}  // namespace arcoll
