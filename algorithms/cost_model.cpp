#include "algorithms/cost_model.hpp"

#include <algorithm>

#include <limits>

#include "algorithms/algorithm.hpp"
#include "arcoll/error.hpp"

namespace arcoll::cost {

int floor_log2(int p) {
  int log = 0;
  while ((2 << log) <= p) ++log;
  return log;
}

int floor_pof2(int p) {
  return 1 << floor_log2(p);
}

LinkCost exchange_link(const Layout& layout, int distance) {
  if (layout.hosts == 1 || (layout.ranks_per_host != 0 && distance < layout.ranks_per_host))
    return layout.intra;
  LinkCost link = layout.inter;
  link.beta *= layout.link_sharers();
  return link;
}

namespace {

constexpr double kTie = 1e-9;

Plan predict_with(const AlgorithmInfo& info, const Layout& layout, double bytes) {
  Plan plan{info.name, layout.chunk_bytes,
            info.allreduce_cost({layout, bytes, layout.chunk_bytes})};
  if (info.chunked)
    for (std::size_t chunk : kChunkCandidates) {
      const double seconds = info.allreduce_cost({layout, bytes, chunk});
      if (seconds < plan.seconds) plan = {info.name, chunk, seconds};
    }
  return plan;
}

}  // namespace

Plan predict(const std::string& algorithm, const Layout& layout, double bytes) {
  for (const AlgorithmInfo* info : AlgorithmRegistry::instance().all())
    if (info->name == algorithm && info->allreduce_cost) return predict_with(*info, layout, bytes);
  throw InvalidArgument("cost model",
                        "no cost formula for all-reduce algorithm '" + algorithm + "'");
}

Plan best(const Layout& layout, double bytes, bool flat_only) {
  const bool one_level = layout.hosts == 1 || layout.ranks == layout.hosts;
  Plan best{"", 0, std::numeric_limits<double>::infinity()};
  for (const AlgorithmInfo* info : AlgorithmRegistry::instance().all()) {
    if (!info->allreduce_cost) continue;
    if (info->composite && (flat_only || one_level)) continue;
    // Formulas that agree up to rounding (ring, multi-channel ring and halving-doubling on
    // large buffers) must not be told apart by rounding: the first in name order keeps it.
    Plan plan = predict_with(*info, layout, bytes);
    if (plan.seconds < best.seconds * (1 - kTie)) best = plan;
  }
  if (best.algorithm.empty())
    throw InternalError("cost model", "no all-reduce algorithm to choose");
  return best;
}

double parameter_server_seconds(const Layout& layout, double bytes, int dedicated,
                                double piece_bytes) {
  const double workers = layout.ranks;
  const double piece = std::min(bytes, piece_bytes);
  if (dedicated > 0) {
    // The workers' host links (their ranks share them) and the servers' own links.
    const LinkCost& link = layout.hosts > 1 ? layout.inter : layout.intra;
    const double per_host = layout.hosts > 1 ? workers / layout.hosts : 1;
    const double server_bytes = workers * bytes / dedicated;
    return 2 * link.alpha +
           std::max({per_host * bytes * link.beta, server_bytes * link.beta,
                     server_bytes * link.gamma}) +
           piece * (link.beta + workers * link.gamma);
  }
  // A share in every worker: what leaves a host is its workers' pushes to the shares other
  // hosts serve and its shares' replies to other hosts' workers, as much of each.
  if (layout.hosts > 1) {
    const double per_host = workers / layout.hosts;
    const double crossing = 2 * per_host * bytes * (layout.hosts - 1) / layout.hosts;
    return 2 * layout.inter.alpha +
           std::max(crossing * layout.inter.beta, bytes / layout.hosts * workers / layout.hosts *
                                                      layout.intra.gamma) +
           piece * (layout.inter.beta + workers * layout.intra.gamma);
  }
  const double crossing = 2 * bytes * (workers - 1) / workers;
  return 2 * layout.intra.alpha + crossing * layout.intra.beta +
         bytes * (workers - 1) / workers * layout.intra.gamma +
         piece * (layout.intra.beta + workers * layout.intra.gamma);
}

}  // namespace arcoll::cost
