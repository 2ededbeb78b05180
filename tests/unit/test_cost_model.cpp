// The cost model's formulas against hand-computed values, and auto's choice following them.
#include <gtest/gtest.h>

#include "algorithms/cost_model.hpp"
#include "arcoll/error.hpp"
#include "topology/exchange_rates.hpp"

namespace arcoll {
namespace {

constexpr double kAlpha = 2e-6, kBeta = 1e-9, kGamma = 0.5e-9;

Layout one_host(int ranks) {
  Layout l;
  l.ranks = ranks;
  l.hosts = 1;
  l.ranks_per_host = ranks;
  l.intra = {kAlpha, kBeta, kGamma};
  l.inter = {10 * kAlpha, 8 * kBeta, kGamma};
  l.chunk_bytes = 512 * 1024;
  l.channels = 2;
  return l;
}

TEST(CostModel, RingIsTwoPMinusOneStepsOfASegment) {
  const double n = 1 << 20;  // 4 segments of 256 KiB: one chunk each
  EXPECT_DOUBLE_EQ(cost::predict("ring", one_host(4), n).seconds,
                   6 * kAlpha + 1.5 * n * kBeta + 0.75 * n * kGamma);
  // 64 MiB: 16 MiB segments in 32 chunks of 512 KiB, each step 32 messages.
  const double big = 64.0 * (1 << 20);
  EXPECT_DOUBLE_EQ(cost::predict("ring", one_host(4), big).seconds,
                   6 * 32 * kAlpha + 1.5 * big * kBeta + 0.75 * big * kGamma);
}

// Buffers in cache move at the cached rates, large ones at the others, and sizes between
// go from one to the other, halfway (in log size) half of the way.
TEST(CostModel, CachedRatesHoldForSmallBuffersAndFadeOutToMemoryRates) {
  Layout cached = one_host(4);
  cached.intra.cached_beta = kBeta / 4;
  cached.intra.cached_gamma = kGamma / 2;
  const LinkCost small = cached.intra.at(64 * 1024), large = cached.intra.at(64 << 20);
  EXPECT_DOUBLE_EQ(small.beta, kBeta / 4);
  EXPECT_DOUBLE_EQ(small.gamma, kGamma / 2);
  EXPECT_DOUBLE_EQ(large.beta, kBeta);
  EXPECT_DOUBLE_EQ(large.gamma, kGamma);
  EXPECT_DOUBLE_EQ(cached.intra.at(2 << 20).beta, (kBeta / 4 + kBeta) / 2);  // 2 MiB: halfway
  EXPECT_EQ(small.at(64 << 20).beta, small.beta);  // sized once
  // No cached figures (the built-in costs): one rate at every size.
  EXPECT_DOUBLE_EQ(one_host(4).intra.at(1024).beta, kBeta);
  // The prediction uses the rates of its size.
  const double n = 1 << 20;
  EXPECT_LT(cost::predict("ring", cached, n).seconds, cost::predict("ring", one_host(4), n).seconds);
  EXPECT_DOUBLE_EQ(cost::predict("ring", cached, 64 << 20).seconds,
                   cost::predict("ring", one_host(4), 64 << 20).seconds);
}

// The host's last-level cache sets where the cached rates end: 2 ranks, each with a send and
// a receive buffer, in a 32 MiB cache: cached up to 4 MiB buffers, out of cache from 16 MiB.
TEST(CostModel, TheLastLevelCacheSetsWhereCachedRatesEnd) {
  LinkCost link{kAlpha, kBeta, kGamma, kBeta / 4, kGamma / 2};
  set_cache_window(link, 32 << 20, 2);
  EXPECT_DOUBLE_EQ(link.cached_until, 4 << 20);
  EXPECT_DOUBLE_EQ(link.uncached_from, 16 << 20);
  EXPECT_DOUBLE_EQ(link.at(4 << 20).beta, kBeta / 4);
  EXPECT_DOUBLE_EQ(link.at(8 << 20).beta, (kBeta / 4 + kBeta) / 2);  // halfway in log size
  EXPECT_DOUBLE_EQ(link.at(16 << 20).beta, kBeta);
  // Four times the ranks share it: each one's buffers leave it four times sooner.
  set_cache_window(link, 32 << 20, 8);
  EXPECT_DOUBLE_EQ(link.uncached_from, 4 << 20);
  // Unknown: the sizes the figures were measured at.
  set_cache_window(link, 0, 2);
  EXPECT_DOUBLE_EQ(link.cached_until, kCachedBytes);
  EXPECT_DOUBLE_EQ(link.uncached_from, kUncachedBytes);
}

// Below the cached size β goes to the rate of small messages, which fit one fragment, halfway
// (in log size) half of the way; γ keeps its cached rate.
TEST(CostModel, SmallAllReducesMoveTheirBytesAtTheSmallMessageRate) {
  const LinkCost link{kAlpha, kBeta, kGamma, kBeta / 4, kGamma / 2, kBeta / 2};
  EXPECT_DOUBLE_EQ(link.at(1024).beta, kBeta / 2);
  EXPECT_DOUBLE_EQ(link.at(kSmallMessageBytes).beta, kBeta / 2);
  EXPECT_DOUBLE_EQ(link.at(64 * 1024).beta, (kBeta / 2 + kBeta / 4) / 2);  // 16 KiB to 256 KiB
  EXPECT_DOUBLE_EQ(link.at(kCachedBytes).beta, kBeta / 4);
  EXPECT_DOUBLE_EQ(link.at(1024).gamma, kGamma / 2);
  EXPECT_EQ(link.at(1024).at(64 * 1024).beta, link.at(1024).beta);  // sized once
  // Without the figure (tuning files of earlier versions): the cached rate.
  const LinkCost without{kAlpha, kBeta, kGamma, kBeta / 4, kGamma / 2};
  EXPECT_DOUBLE_EQ(without.at(1024).beta, kBeta / 4);
  // The prediction of a 2-rank halving-doubling: two messages of half the buffer, one reduced.
  Layout layout = one_host(2);
  layout.intra = link;
  const double n = 8192;
  EXPECT_DOUBLE_EQ(cost::predict("halving_doubling", layout, n).seconds,
                   2 * (kAlpha + n / 2 * kBeta / 2) + n / 2 * kGamma / 2);
}

TEST(CostModel, RecursiveDoublingAndHalvingDoubling) {
  const double n = 4096;
  EXPECT_DOUBLE_EQ(cost::predict("recursive_doubling", one_host(4), n).seconds,
                   2 * (kAlpha + n * (kBeta + kGamma)));
  // Five ranks: one pair folded in and out around the four.
  EXPECT_DOUBLE_EQ(cost::predict("recursive_doubling", one_host(5), n).seconds,
                   2 * (kAlpha + n * (kBeta + kGamma)) + 2 * (kAlpha + n * kBeta) + n * kGamma);
  // Rabenseifner on 4: 2 log2 p messages, the ring's bytes.
  EXPECT_DOUBLE_EQ(cost::predict("halving_doubling", one_host(4), n).seconds,
                   4 * kAlpha + 1.5 * n * kBeta + 0.75 * n * kGamma);
}

TEST(CostModel, TreePipelinesChunksUpAndDown) {
  // 8 ranks (tree height 3), 4 MiB: 2 MiB per tree in m chunks of the chunk the model picked.
  const Plan plan = cost::predict("tree", one_host(8), 4.0 * (1 << 20));
  const double half = 2.0 * (1 << 20), m = half / static_cast<double>(plan.chunk_bytes);
  const double chunk = half / m;
  EXPECT_DOUBLE_EQ(plan.seconds, (m + 2 * 3 - 1) * (kAlpha + 4 * chunk * kBeta + 2 * chunk * kGamma));
}

TEST(CostModel, HierarchicalComposesHostAndNetworkTerms) {
  Layout l = one_host(4);
  l.hosts = 2;
  l.ranks_per_host = 2;
  const double n = 8.0 * (1 << 20);
  // Within hosts: reduce-scatter and all-gather of 2 ranks; across: n/2 over 2 hosts, the
  // host link shared by its 2 ranks.
  Layout across = l;
  across.ranks = across.hosts = 2;
  across.ranks_per_host = 1;
  across.inter.beta *= 2;
  across.intra = across.inter;
  const double within = 2 * kAlpha + 2 * (n / 2) * kBeta + (n / 2) * kGamma;
  EXPECT_DOUBLE_EQ(cost::predict("hierarchical", l, n).seconds,
                   within + cost::best(across, n / 2, true).seconds);
  EXPECT_DOUBLE_EQ(cost::predict("torus2d", l, n).seconds,
                   within + cost::predict("ring", across, n / 2).seconds);
  // Across slow links it beats the flat ring, which pays the network's β on 1.5 n.
  EXPECT_LT(cost::predict("hierarchical", l, n).seconds, cost::predict("ring", l, n).seconds);
  EXPECT_EQ(cost::best(l, n).algorithm, "hierarchical");
}

TEST(CostModel, AutoPrefersFewMessagesSmallAndFewBytesLarge) {
  EXPECT_EQ(cost::best(one_host(8), 8).algorithm, "recursive_doubling");
  const Plan large = cost::best(one_host(8), 256.0 * (1 << 20));
  EXPECT_NE(large.algorithm, "recursive_doubling");
  // Composite algorithms are never chosen on one host: they would run a flat one.
  EXPECT_NE(large.algorithm, "hierarchical");
  EXPECT_NE(large.algorithm, "torus2d");
  EXPECT_THROW(cost::predict("no_such_algorithm", one_host(2), 8), std::exception);
}

// The boards: half a step, the part written at a message's β, then every rank reads and
// reduces p - 1 parts; chosen for small buffers where there are boards, never for what does
// not fit or without them.
TEST(CostModel, BoardsTakeSmallBuffersWhereAllRanksShareMemory) {
  Layout l = one_host(8);
  l.board_capacity = 4096;
  EXPECT_DOUBLE_EQ(cost::predict("board", l, 1000).seconds,
                   0.5 * kAlpha + 1000 * kBeta + 7 * 1000 * (kBeta / 2 + kGamma));
  EXPECT_EQ(cost::best(l, 8).algorithm, "board");
  EXPECT_NE(cost::best(l, 4096).algorithm, "board");  // reading 7 parts costs more
  // Past the capacity it runs, and is predicted as, the best of the others.
  EXPECT_DOUBLE_EQ(cost::predict("board", l, 4097).seconds, cost::best(l, 4097).seconds);
  EXPECT_NE(cost::best(l, 4097).algorithm, "board");
  EXPECT_EQ(cost::best(one_host(8), 8).algorithm, "recursive_doubling");  // no boards
  // Two ranks: one part each way, as one round of recursive doubling without its matching;
  // past α / β bytes the round's message costs less than taking the lines back.
  Layout pair = one_host(2);
  pair.board_capacity = 4096;
  EXPECT_EQ(cost::best(pair, 1024).algorithm, "board");
  EXPECT_EQ(cost::best(pair, 4096).algorithm, "recursive_doubling");
}

// Where the link forwards, halving-doubling's last halving round returns its half (one
// message) with no copy into the link: half its β less; a half of several chunks, or a link
// that does not forward, costs the whole round.
TEST(CostModel, ForwardingLinksReturnTheLastHalfAtHalfItsBeta) {
  for (int ranks : {2, 4}) {
    Layout plain = one_host(ranks);
    Layout forwarding = plain;
    forwarding.intra.forwards = true;
    const double small = 64 * 1024, large = 16.0 * (1 << 20);
    const double last_half = small / ranks;  // the last halving round's part
    EXPECT_DOUBLE_EQ(cost::predict("halving_doubling", forwarding, small).seconds,
                     cost::predict("halving_doubling", plain, small).seconds -
                         last_half * kBeta / 2);
    EXPECT_DOUBLE_EQ(cost::predict("halving_doubling", forwarding, large).seconds,
                     cost::predict("halving_doubling", plain, large).seconds);
  }
}

// Calibration: an exchange's bandwidth leaves out α, but never more than half its time.
TEST(Calibration, ExchangeBandwidthStaysBoundedWhenAlphaIsNearTheWholeTime) {
  EXPECT_DOUBLE_EQ(exchange_gbs(1'000'000, 1e-3, 0.2e-3), 1.25);
  EXPECT_DOUBLE_EQ(exchange_gbs(1'000'000, 1e-3, 1e-3), 2.0);  // was 1e6 GB/s
  EXPECT_DOUBLE_EQ(exchange_gbs(1'000'000, 1e-3, 2e-3), 2.0);
}

// Hosts of one rank each: the parameter server's link terms against the ring's.
Layout hosts_of_one(int hosts) {
  Layout l = one_host(hosts);
  l.hosts = hosts;
  l.ranks_per_host = 1;
  l.inter = {kAlpha, kBeta, 0};
  return l;
}

TEST(CostModel, ParameterServerLinksFollowWherePiecesLive) {
  constexpr double kPiece = 1 << 20;
  const double big = 256 * kPiece;  // many pieces on every server
  // Dedicated servers on links of their own: each worker sends and receives the buffer once;
  // each server a quarter of every worker's, and its last piece to every worker.
  EXPECT_DOUBLE_EQ(cost::parameter_server_seconds(hosts_of_one(4), big, 4, kPiece),
                   2 * kAlpha + 4 * (big / 4 + kPiece) * kBeta);
  EXPECT_DOUBLE_EQ(cost::parameter_server_seconds(hosts_of_one(4), big, 8, kPiece),
                   2 * kAlpha + (big + kPiece) * kBeta);
  // Two servers for four workers: each server's link carries half of every worker's buffer.
  EXPECT_DOUBLE_EQ(cost::parameter_server_seconds(hosts_of_one(4), big, 2, kPiece),
                   2 * kAlpha + 4 * (big / 2 + kPiece) * kBeta);
  // A key of one piece lives on one server: every worker's copy crosses its link.
  EXPECT_DOUBLE_EQ(cost::parameter_server_seconds(hosts_of_one(4), kPiece / 2, 4, kPiece),
                   2 * kAlpha + 4 * kPiece * kBeta);
  // A share in every worker moves what a ring moves, 2(n-1)/n of the buffer, plus the tail.
  EXPECT_DOUBLE_EQ(cost::parameter_server_seconds(hosts_of_one(4), big, 0, kPiece),
                   2 * kAlpha + (1.5 * big + 3 * kPiece) * kBeta);
  // Dedicated servers beat the ring only where their links add bandwidth.
  const double ring = cost::predict("ring", hosts_of_one(4), big).seconds;
  EXPECT_LT(cost::parameter_server_seconds(hosts_of_one(4), big, 4, kPiece), ring);
  EXPECT_GT(cost::parameter_server_seconds(hosts_of_one(4), big, 2, kPiece), ring);
}

// Every algorithm that runs one of the collectives arbench measures states its time for it.
TEST(CostModel, EveryAlgorithmOfEveryCollectiveHasAFormula) {
  for (Collective c : {Collective::reduce_scatter, Collective::allgather, Collective::broadcast,
                       Collective::reduce, Collective::gather, Collective::scatter,
                       Collective::alltoall, Collective::allreduce}) {
    EXPECT_EQ(algorithm_names(c, /*with_cost=*/true), algorithm_names(c)) << to_string(c);
    for (const std::string& name : algorithm_names(c)) {
      EXPECT_EQ(cost::predict(name, one_host(1), 1 << 20, c).seconds, 0) << name;
      EXPECT_GT(cost::predict(name, one_host(3), 1 << 20, c).seconds, 0) << name;
    }
  }
  EXPECT_THROW(cost::predict("tree", one_host(4), 8, Collective::gather), InvalidArgument);
}

// The collectives other than all-reduce: 1 MiB on 4 ranks (blocks of 256 KiB, one chunk each).
TEST(CostModel, CollectivesMoveWhatTheirAlgorithmsMove) {
  const Layout l = one_host(4);
  const double n = 1 << 20, block = n / 4;
  auto predict = [&](const char* name, Collective c, double bytes = 1 << 20) {
    return cost::predict(name, l, bytes, c).seconds;
  };
  // Every block at once: the root's (any rank's) link takes three of them.
  for (Collective c : {Collective::gather, Collective::scatter, Collective::allgather,
                       Collective::alltoall})
    EXPECT_DOUBLE_EQ(predict("direct", c), kAlpha + 3 * block * kBeta) << to_string(c);
  // The ring: three steps of a block, reduced or not; reduce gathers to the root after.
  EXPECT_DOUBLE_EQ(predict("ring", Collective::allgather), 3 * (kAlpha + block * kBeta));
  EXPECT_DOUBLE_EQ(predict("ring", Collective::reduce_scatter),
                   3 * (kAlpha + block * (kBeta + kGamma)));
  EXPECT_DOUBLE_EQ(predict("ring", Collective::reduce),
                   3 * (kAlpha + block * (kBeta + kGamma)) + kAlpha + 3 * block * kBeta);
  // A chain of 4 ranks, 2 MiB in 4 chunks of 512 KiB: 4 + 2 steps of one chunk.
  EXPECT_DOUBLE_EQ(predict("ring", Collective::broadcast, 2 * n),
                   6 * (kAlpha + 512 * 1024 * kBeta));
  // Direct broadcast: the root's link carries the buffer to three ranks, or once where they read
  // it in parallel.
  EXPECT_DOUBLE_EQ(predict("direct", Collective::broadcast), kAlpha + 3 * n * kBeta);
  Layout fanning = l;
  fanning.intra.fans_out = true;
  EXPECT_DOUBLE_EQ(cost::predict("direct", fanning, n, Collective::broadcast).seconds,
                   kAlpha + n * kBeta);
  // Direct reduce: the root reads and reduces three buffers.
  EXPECT_DOUBLE_EQ(predict("direct", Collective::reduce), kAlpha + 3 * n * (kBeta / 2 + kGamma));
  // Halving-doubling reduce: a round of halves, then the last round (quarters) beside the three
  // quarters into the root, which take longer, and one chunk (a quarter) more.
  EXPECT_DOUBLE_EQ(predict("halving_doubling", Collective::reduce),
                   kAlpha + n / 2 * (kBeta + kGamma) + kAlpha + 3 * block * kBeta + block * kBeta);
}

// The boards' prediction of a collective is theirs while a call fits there, else that of the
// algorithm it then goes by: a reduce direct (on 2 ranks at every size), on 4 then the ring,
// and halving-doubling from 16 MiB; a broadcast direct up to 128 KiB, then down the chain.
TEST(CostModel, BoardsPredictWhatTheCallRuns) {
  Layout l = one_host(4);
  l.board_capacity = 64 * 1024;
  Layout without = l;
  without.board_capacity = 0;
  const double small = 1024;
  EXPECT_DOUBLE_EQ(cost::predict("board", l, small, Collective::reduce).seconds,
                   kAlpha / 2 + small * kBeta + 3 * small * (kBeta / 2 + kGamma));
  EXPECT_DOUBLE_EQ(cost::predict("board", l, small, Collective::allgather).seconds,
                   kAlpha / 2 + small / 4 * kBeta + 3 * small / 4 * kBeta / 2);
  auto same = [](const char* name, const Layout& with, const Layout& by_messages, double bytes,
                 Collective c) {
    EXPECT_DOUBLE_EQ(cost::predict("board", with, bytes, c).seconds,
                     cost::predict(name, by_messages, bytes, c).seconds)
        << name << " " << bytes;
  };
  same("direct", l, without, 64 * 1024, Collective::reduce);
  same("ring", l, without, 4 << 20, Collective::reduce);
  same("halving_doubling", l, without, 32 << 20, Collective::reduce);
  // A broadcast among ranks that share boards goes straight from the root while small, then
  // down the chain.
  same("direct", l, without, 64 * 1024, Collective::broadcast);
  same("ring", l, without, 256 * 1024, Collective::broadcast);
  same("direct", l, without, 64 * 1024, Collective::alltoall);
  Layout pair = one_host(2);
  pair.board_capacity = 64 * 1024;
  Layout pair_without = pair;
  pair_without.board_capacity = 0;
  same("direct", pair, pair_without, 4 << 20, Collective::reduce);
  // A broadcast goes straight from the root where more than 2 ranks of one host read it in
  // parallel, else down the chain.
  Layout fanning = without;
  fanning.intra.fans_out = true;
  same("direct", fanning, fanning, 64 * 1024, Collective::broadcast);
  // (64 MiB: 128 chunks, where the chain and direct differ on 2 ranks too.)
  Layout pair_fanning = pair_without;
  pair_fanning.intra.fans_out = true;
  same("ring", pair_fanning, pair_fanning, 64 << 20, Collective::broadcast);
  Layout hosts_fanning = fanning;
  hosts_fanning.hosts = 2;
  hosts_fanning.ranks_per_host = 2;
  same("ring", hosts_fanning, hosts_fanning, 64 << 20, Collective::broadcast);
}

}  // namespace
}  // namespace arcoll
