#include "algorithms/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "algorithms/algorithm.hpp"
#include "arcoll/error.hpp"

namespace arcoll {

namespace {

// Where `bytes` lies from `from` to `to` (0 to 1), in log(bytes).
double log_position(double bytes, double from, double to) {
  return std::clamp(std::log(std::max(bytes, 1.0) / from) / std::log(to / from), 0.0, 1.0);
}

}  // namespace

LinkCost LinkCost::at(double bytes) const {
  const double toward_memory = log_position(bytes, cached_until, uncached_from);
  auto blend = [&](double cached, double uncached) {
    return cached > 0 ? cached + toward_memory * (uncached - cached) : uncached;
  };
  double sized_beta = blend(cached_beta, beta);
  if (small_beta > 0 && bytes < kCachedBytes)
    sized_beta = small_beta + log_position(bytes, kSmallMessageBytes, kCachedBytes) *
                                  (sized_beta - small_beta);
  LinkCost sized{alpha, sized_beta, blend(cached_gamma, gamma)};  // no cached or small ones
  sized.forwards = forwards;
  sized.fans_out = fans_out;
  sized.cheap_messages = cheap_messages;
  return sized;
}

double cache_per_buffer(double cache_bytes, int ranks_per_host) {
  return cache_bytes <= 0 || ranks_per_host <= 0 ? 0 : cache_bytes / (2.0 * ranks_per_host);
}

void set_cache_window(LinkCost& link, double cache_bytes, int ranks_per_host) {
  const double per_buffer = cache_per_buffer(cache_bytes, ranks_per_host);
  if (per_buffer == 0) {
    link.cached_until = kCachedBytes;
    link.uncached_from = kUncachedBytes;
    return;
  }
  link.cached_until = per_buffer / 2;
  link.uncached_from = per_buffer * 2;
}

}  // namespace arcoll

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

Plan predict_with(const AlgorithmInfo& info, const CostFn& cost, const Layout& unsized,
                  double bytes) {
  Layout layout = unsized;
  layout.intra = unsized.intra.at(bytes);
  layout.inter = unsized.inter.at(bytes);
  Plan plan{info.name, layout.chunk_bytes, cost({layout, bytes, layout.chunk_bytes})};
  if (info.chunked)
    for (std::size_t chunk : kChunkCandidates) {
      const double seconds = cost({layout, bytes, chunk});
      if (seconds < plan.seconds) plan = {info.name, chunk, seconds};
    }
  return plan;
}

const CostFn* cost_of(const AlgorithmInfo& info, Collective collective) {
  const auto found = info.costs.find(collective);
  return found == info.costs.end() ? nullptr : &found->second;
}

}  // namespace

Plan predict(const std::string& algorithm, const Layout& layout, double bytes,
             Collective collective) {
  const AlgorithmInfo* info = AlgorithmRegistry::instance().find(algorithm);
  const CostFn* cost = info != nullptr ? cost_of(*info, collective) : nullptr;
  if (cost == nullptr)
    throw InvalidArgument("cost model", "no cost formula for " + std::string(to_string(collective)) +
                                            " algorithm '" + algorithm + "'");
  Plan plan = predict_with(*info, *cost, layout, bytes);
  // An all-reduce algorithm that cannot take this size (the boards, past their capacity) runs
  // the best flat one of the others: predicted as that.
  if (collective == Collective::allreduce && std::isinf(plan.seconds))
    plan.seconds = best(layout, bytes, /*flat_only=*/true).seconds;
  return plan;
}

Plan best(const Layout& layout, double bytes, bool flat_only) {
  const bool one_level = layout.hosts == 1 || layout.ranks == layout.hosts;
  Plan best{"", 0, std::numeric_limits<double>::infinity()};
  for (const AlgorithmInfo* info : AlgorithmRegistry::instance().all()) {
    const CostFn* cost = cost_of(*info, Collective::allreduce);
    if (cost == nullptr) continue;
    if (info->composite && (flat_only || one_level)) continue;
    // Formulas that agree up to rounding (ring, multi-channel ring and halving-doubling on
    // large buffers) must not be told apart by rounding: the first in name order keeps it.
    Plan plan = predict_with(*info, *cost, layout, bytes);
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
  const double pieces = std::max(1.0, std::ceil(bytes / piece_bytes));
  // Ranks that share a link: a host's across hosts; on one host each rank is its own.
  const bool across = layout.hosts > 1;
  const LinkCost link = (across ? layout.inter : layout.intra).at(bytes);
  const double hosts = across ? layout.hosts : workers;
  const double per_host = workers / hosts;
  if (dedicated > 0) {
    // The busiest server holds ceil(pieces / servers) of the key's pieces: a key of one piece
    // lives on one server, whose link carries every worker's copy of it.
    const double held = std::min(bytes, std::ceil(pieces / dedicated) * piece);
    const double worker_link = per_host * (bytes + piece);
    const double server_link = workers * (held + piece);
    return 2 * link.alpha +
           std::max(std::max(worker_link, server_link) * link.beta, workers * held * link.gamma) +
           workers * piece * link.gamma;
  }
  // A share in every worker: what leaves the busiest host is its workers' pushes of the pieces
  // other hosts serve and its servers' replies to other hosts' workers.
  const double held = std::min(bytes, std::ceil(pieces / hosts) * piece);
  const double others = workers - per_host;
  const double leaving = per_host * (bytes - held) + others * held;
  return 2 * link.alpha +
         std::max((leaving + others * piece) * link.beta, workers * held / per_host * link.gamma) +
         workers * piece * link.gamma;
}

}  // namespace arcoll::cost
