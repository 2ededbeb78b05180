// Every registered all-reduce algorithm through the whole correctness suite, on world sizes 1
// to 8, over the transport of the ctest prefix (each transport, or the registry's choices within
// and across emulated hosts); mixed precision on the wire; the cost model's choices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/host.hpp"
#include "arcoll/tuning.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"
#include "tests/support/scratch.hpp"

namespace arcoll::testing {
namespace {

using AlgorithmAndWorld = std::tuple<std::string, int>;

class AlgorithmWorld : public ::testing::TestWithParam<AlgorithmAndWorld> {};

// 64 KiB chunks: the larger counts of the suite take several pipeline steps.
TEST_P(AlgorithmWorld, EveryTypeOpAndCountMatchesReference) {
  const auto& [algorithm, world] = GetParam();
  // Board algorithms need every rank on one host over shm; elsewhere they run another
  // algorithm, tested on its own: a few worlds show that they do.
  if (algorithm.rfind("board", 0) == 0 && forced_transport() != "shm" && world > 3)
    GTEST_SKIP() << "no shared boards on this run";
  run_ranks(world,
            [&](Communicator& comm) {
              EXPECT_EQ(comm.algorithm_name(), algorithm);
              EXPECT_EQ(comm.transport_name(), expected_transport(comm));
              // Every pair of type and op at one odd world size on the runs forced to shm or
              // tcp, a sample everywhere else: the pairs differ in the reduction kernels, which
              // see no transport.
              const auto transport = forced_transport();
              const bool every = world == 3 && (transport == "shm" || transport == "tcp");
              check_allreduce(comm, 3, every ? Coverage::every_pair : Coverage::sampled);
            },
            // Chunks small enough that the largest count takes several per ring step on few
            // ranks.
            {{"ARCOLL_ALGO", algorithm}, {"ARCOLL_CHUNK_BYTES", "16K"}, {"ARCOLL_CHANNELS", "3"}});
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, AlgorithmWorld,
    ::testing::Combine(::testing::ValuesIn(Communicator::allreduce_algorithms()),
                       ::testing::Range(1, 9)),
    [](const ::testing::TestParamInfo<AlgorithmAndWorld>& info) {
      return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
    });

// Every algorithm that implements reduce (ARCOLL_ALGO names it; auto, the board, chooses
// among them by size), to every root, in and out of place, against the reference: counts of
// nothing, one, primes and non-multiples of the world and of the 16 KiB chunks.
class ReduceWorld : public ::testing::TestWithParam<AlgorithmAndWorld> {};

TEST_P(ReduceWorld, EveryRootTypeAndCountMatchesReference) {
  const auto& [algorithm, world] = GetParam();
  run_ranks(world,
            [&](Communicator& comm) {
              const std::size_t counts[] = {0, 1, 3, 7, 4099, 12289, 70001};
              int cases = 0;
              for (int root = 0; root < comm.size(); ++root)
                for (DataType t : {DataType::f32, DataType::f64, DataType::i32, DataType::bf16})
                  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
                    const std::size_t count = counts[cases % std::size(counts)];
                    const bool in_place = ++cases % 2 == 0;
                    auto input = make_input(t, op, comm.rank(), count, 29);
                    std::vector<unsigned char> out(count * size_of(t));
                    unsigned char* result = in_place ? input.data() : out.data();
                    comm.reduce(input.data(), comm.rank() == root ? result : nullptr, count, t,
                                op, root);
                    if (comm.rank() == root) {
                      EXPECT_EQ(count_wrong(result, t, op, comm.size(), count, 29), 0u)
                          << algorithm << " root " << root << " " << label(t, op, count, in_place);
                    }
                  }
            },
            {{"ARCOLL_ALGO", algorithm}, {"ARCOLL_CHUNK_BYTES", "16K"}});
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ReduceWorld,
                         ::testing::Combine(::testing::Values("direct", "ring", "halving_doubling"),
                                            ::testing::Range(1, 9)),
                         [](const ::testing::TestParamInfo<AlgorithmAndWorld>& info) {
                           return std::get<0>(info.param) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// The direct broadcast, which the board picks where ranks read the root's buffer in parallel
// (UCX) or share the boards (shm, small calls), named on every transport: every root, types and
// counts of nothing, one, a prime, and one past UCX's eager limits and shm's single-copy one, on
// odd and even worlds.
TEST(DirectBroadcast, EveryRootTypeAndCountMatchesTheRoots) {
  for (int world : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    run_ranks(world,
              [](Communicator& comm) {
                const std::size_t counts[] = {0, 1, 4099, 70001};
                int cases = 0;
                for (int root = 0; root < comm.size(); ++root)
                  for (DataType t : {DataType::f32, DataType::f64, DataType::bf16}) {
                    const std::size_t count = counts[cases++ % std::size(counts)];
                    auto buffer = make_input(t, ReduceOp::max, comm.rank(), count, 31);
                    comm.broadcast(buffer.data(), count, t, root);
                    EXPECT_EQ(buffer, make_input(t, ReduceOp::max, root, count, 31))
                        << "root " << root << " " << label(t, ReduceOp::max, count, false);
                  }
              },
              {{"ARCOLL_ALGO", "direct"}});
  }
}

// All-to-all in place by the direct algorithm (which the board picks past its own sizes): each
// rank's blocks out are kept aside before the peers' blocks land over them, its own stays; on
// odd and even worlds, counts of nothing, one, a prime, and one past shm's single-copy and
// UCX's eager limits, a 2-byte and a 4-byte type.
TEST(DirectAlltoall, InPlaceMatchesEveryRanksBlocks) {
  for (int world : {1, 2, 3, 5}) {
    SCOPED_TRACE(std::to_string(world) + " ranks");
    run_ranks(
        world,
        [](Communicator& comm) {
          const int p = comm.size(), rank = comm.rank();
          for (DataType t : {DataType::f32, DataType::bf16})
            for (std::size_t count : {0, 1, 4099, 70001}) {
              const std::size_t block = count * size_of(t);
              auto block_of = [&](int owner) {
                return make_input(t, ReduceOp::max, owner, count, 37);
              };
              std::vector<unsigned char> buffer(static_cast<std::size_t>(p) * block);
              for (int q = 0; q < p; ++q)  // block q goes to rank q
                std::ranges::copy(block_of(rank * p + q), buffer.begin() + q * block);
              comm.alltoall(buffer.data(), buffer.data(), count, t);
              for (int q = 0; q < p; ++q)
                EXPECT_TRUE(std::equal(buffer.begin() + q * block, buffer.begin() + (q + 1) * block,
                                       block_of(q * p + rank).begin()))
                    << "block from rank " << q << " " << to_string(t) << " count " << count;
            }
        },
        {{"ARCOLL_ALGO", "direct"}});
  }
}

// The board sends a broadcast of 3 ranks straight from the root over UCX with a lane by which
// receivers read the sender's memory (cma here), and over shm while it is small (ranks that
// share the boards on one host: 64 KiB); without such a lane (UCX's shared memory alone), at
// 64 MiB over shm, between emulated hosts, and over every other transport, down the chain.
TEST(DirectBroadcast, ChosenWhereRanksReadTheRootsBufferInParallelOrShareBoards) {
  const char* named = std::getenv("ARCOLL_TRANSPORT");
  const std::string transport = named != nullptr ? named : "shm";
  auto expect_broadcast_by = [](const std::string& algorithm, std::size_t bytes,
                                const std::map<std::string, std::string>& env) {
    run_ranks(
        3,
        [&](Communicator& comm) {
          EXPECT_EQ(comm.predict("broadcast", bytes).seconds,
                    comm.predict("broadcast", bytes, algorithm).seconds)
              << "a broadcast of " << bytes << " B by " << algorithm << " expected";
          EXPECT_NE(comm.predict("broadcast", bytes, "direct").seconds,
                    comm.predict("broadcast", bytes, "ring").seconds);
        },
        env);
  };
  const bool ucx = transport == "ucx";
  expect_broadcast_by(ucx ? "direct" : "ring", std::size_t{64} << 20, {});
  const bool shares_boards = transport == "shm" && std::getenv("ARCOLL_EMULATED_HOSTS") == nullptr;
  expect_broadcast_by(ucx || shares_boards ? "direct" : "ring", 64 * 1024, {});
  if (ucx) expect_broadcast_by("ring", std::size_t{64} << 20, {{"UCX_TLS", "posix,self"}});
}

// Mixed precision: f32 carried as f16 or bf16, accumulated in f32. Inputs are not
// representable on the wire, so the result is off by at most a few wire roundings of the
// partial sums: bounded by (hops + 1) * unit roundoff * sum of |inputs|. Every rank ends with
// the same bits.
class WireWorld : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(WireWorld, ErrorWithinTheWireFormatsBoundAndRanksAgree) {
  const auto& [algorithm, wire] = GetParam();
  for (int world : {3, 4}) {
    run_ranks(
        world,
        [&](Communicator& comm) {
          const double unit = wire == "f16" ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
          for (std::size_t count : {std::size_t{1}, std::size_t{4099}, std::size_t{70001}}) {
            std::vector<float> x(count), out(count);
            for (std::size_t i = 0; i < count; ++i)
              x[i] = 1.0f + 0.001f * static_cast<float>((i * 7 + comm.rank() * 13) % 1000);
            comm.allreduce(x.data(), out.data(), count, DataType::f32, ReduceOp::sum);
            double worst = 0;
            for (std::size_t i = 0; i < count; ++i) {
              double exact = 0, magnitude = 0;
              for (int r = 0; r < comm.size(); ++r) {
                const double v =
                    static_cast<float>(1.0f + 0.001f * static_cast<float>((i * 7 + r * 13) % 1000));
                exact += v;
                magnitude += std::fabs(v);
              }
              const double bound = (2.0 * comm.size() + 1) * unit * magnitude;
              worst = std::max(worst, std::fabs(out[i] - exact) / bound);
            }
            EXPECT_LE(worst, 1.0) << "count " << count << ": error beyond the bound";
            // Every rank holds rank 0's result.
            std::vector<float> first = out;
            comm.broadcast(first.data(), count, DataType::f32, 0);
            EXPECT_EQ(std::memcmp(first.data(), out.data(), count * sizeof(float)), 0)
                << "ranks disagree, count " << count;
          }
          // Other types are not narrowed: exact.
          auto input = make_input(DataType::f64, ReduceOp::sum, comm.rank(), 5003, 4);
          comm.allreduce(input.data(), 5003, DataType::f64, ReduceOp::sum);
          EXPECT_EQ(count_wrong(input.data(), DataType::f64, ReduceOp::sum, comm.size(), 5003, 4),
                    0u);
        },
        {{"ARCOLL_ALGO", algorithm}, {"ARCOLL_WIRE", wire}, {"ARCOLL_CHUNK_BYTES", "64K"}});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, WireWorld,
    ::testing::Combine(::testing::ValuesIn(Communicator::allreduce_algorithms()),
                       ::testing::Values("f16", "bf16")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param);
    });

// Error feedback: what rounding loses in one call is sent in the next, so the average of many
// results converges to the exact sum where plain rounding keeps a bias.
TEST(Wire, ErrorFeedbackRemovesTheBiasOfRepeatedCalls) {
  for (bool feedback : {false, true}) {
    run_ranks(2,
              [&](Communicator& comm) {
                constexpr int kCalls = 64;
                const float value = 1.0f + 1.0f / 3.0f * 0.01f;  // between two f16 values
                std::vector<float> x(256, value), out(256);
                double total = 0;
                for (int call = 0; call < kCalls; ++call) {
                  comm.allreduce(x.data(), out.data(), x.size(), DataType::f32, ReduceOp::sum);
                  total += out[17];
                }
                const double error = std::fabs(total / kCalls - 2.0 * value);
                if (feedback)
                  EXPECT_LT(error, 2e-4) << "error feedback left a bias";
                else
                  EXPECT_GT(error, 5e-4) << "no bias without feedback: the test proves nothing";
              },
              {{"ARCOLL_WIRE", "f16"}, {"ARCOLL_WIRE_ERROR_FEEDBACK", feedback ? "1" : "0"}});
  }
}

// All-reduces of more than 2 and less than 16 MiB on 2 ranks go in whole halves where the
// transport reads reductions across (shm and UCX over cma: src/core/calls.cpp) and the cache
// holds them, each message one half, its reduced result sent back whole: f32 of 2.4 and 4 MiB,
// f64 of 4.8 and 8 MiB, bf16 of 2 MiB (bf16 of 1.2 MiB goes in chunks), in and out of place, on
// every transport (the others go in chunks). It checks the results; which way they went, only
// shm counts (ShmForwarding.HalvesOfMiddleSizedAllReducesAreReadAcrossWhole).
TEST(WholeHalves, MiddleSizedAllReducesOnTwoRanksMatchTheReference) {
  run_ranks(2,
            [](Communicator& comm) {
              assume_last_level_cache(comm, std::size_t{1} << 30);  // holds every call
              std::size_t salt = 0;
              for (std::size_t count : {600'011, 1'048'583})
                for (bool in_place : {false, true})
                  for (auto [type, op] : {std::pair{DataType::f32, ReduceOp::sum},
                                          std::pair{DataType::f64, ReduceOp::max},
                                          std::pair{DataType::bf16, ReduceOp::sum}})
                    EXPECT_EQ(allreduce_wrong(comm, type, op, count, ++salt, in_place), 0u)
                        << label(type, op, count, in_place);
            },
            {{"ARCOLL_ALGO", "halving_doubling"}});
}

// Chunks larger than what is held when it comes early: such a message waits where it is
// (in the ring, in the socket) until its receive is posted. multi_ring waits for its channels
// in another order than the peer sends them, so a chunk of one channel must never stand in
// front of another channel's chunk that a receive waits for.
TEST(LargeChunks, ChannelsNeverWaitBehindEachOther) {
  for (int world : {2, 3}) {
    run_ranks(world,
              [&](Communicator& comm) {
                // 4 MiB and 5 floats: two channels of many 128 KiB chunks, one short. Calls
                // alternate out of place and in place, as arbench's rows do.
                const std::size_t count = (std::size_t{1} << 20) + 5;
                std::vector<float> x(count), out(count);
                for (int call = 0; call < 10; ++call) {
                  const auto shift = static_cast<std::size_t>(call + comm.rank());
                  for (std::size_t i = 0; i < count; ++i)
                    x[i] = static_cast<float>((i + shift) % 97);
                  const bool in_place = call % 2 == 1;
                  comm.allreduce(x.data(), in_place ? x.data() : out.data(), count, DataType::f32,
                                 ReduceOp::sum);
                  const std::vector<float>& result = in_place ? x : out;
                  std::size_t wrong = 0;
                  for (std::size_t i = 0; i < count; ++i) {
                    double exact = 0;
                    for (int r = 0; r < comm.size(); ++r)
                      exact += static_cast<double>((i + static_cast<std::size_t>(call + r)) % 97);
                    wrong += result[i] != exact;
                  }
                  EXPECT_EQ(wrong, 0u) << "call " << call << " on " << comm.size() << " ranks";
                }
              },
              {{"ARCOLL_ALGO", "multi_ring"},
               {"ARCOLL_CHUNK_BYTES", "128K"},
               {"ARCOLL_CHANNELS", "2"},
               {"ARCOLL_TIMEOUT", "20"}});
  }
}

// A launcher that numbers ranks round-robin over hosts (rank r on host r % 2): the rings keep
// each host's ranks together and the host-aware algorithms find the hosts; every algorithm
// still matches the reference.
TEST(InterleavedHosts, EveryAlgorithmMatchesReference) {
  LocalLaunchOptions options;
  options.ranks = 5;
  options.env = {{"ARCOLL_CHUNK_BYTES", "64K"}};
  const auto exits = launch(options, [] {
    const int rank = std::atoi(std::getenv("ARCOLL_RANK"));
    ::setenv("ARCOLL_NODE_ID", rank % 2 == 0 ? "even" : "odd", 1);
    auto comm = Communicator::from_env();
    if (std::getenv("ARCOLL_EMULATED_HOSTS") == nullptr) {
      EXPECT_EQ(comm->node_count(), 2);
      EXPECT_EQ(comm->local_size(), rank % 2 == 0 ? 3 : 2);
    }
    for (const std::string& algorithm : Communicator::allreduce_algorithms()) {
      comm->set_algorithm(algorithm);
      for (DataType t : {DataType::f32, DataType::i64})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
          for (std::size_t count : {std::size_t{1}, std::size_t{13}, std::size_t{70001}}) {
            auto data = make_input(t, op, comm->rank(), count, 12);
            comm->allreduce(data.data(), count, t, op);
            EXPECT_EQ(count_wrong(data.data(), t, op, comm->size(), count, 12), 0u)
                << algorithm << " " << label(t, op, count, true);
          }
    }
    return 0;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
}

// Every figure of every transport measured (above zero), and the same on every rank.
void expect_measured_alike_on_every_rank(Communicator& comm, const Tuning& tuning) {
  std::vector<double> figures;
  for (const auto& [name, c] : tuning.transports) {
    for (const double figure : {c.latency_us, c.bandwidth_gbs, c.reduce_gbs,
                                c.cached_bandwidth_gbs, c.cached_reduce_gbs, c.small_bandwidth_gbs})
      EXPECT_GT(figure, 0) << name;
    figures.insert(figures.end(), {c.latency_us, c.bandwidth_gbs, c.reduce_gbs,
                                   c.cached_bandwidth_gbs, c.cached_reduce_gbs,
                                   c.small_bandwidth_gbs});
  }
  figures.push_back(tuning.last_level_cache_bytes);
  std::vector<double> highest = figures;
  comm.allreduce(highest.data(), highest.size(), DataType::f64, ReduceOp::max);
  EXPECT_EQ(highest, figures);
}

// Tuning measures every transport of the job with all ranks busy, gives every rank the same
// figures, and set_tuning makes the cost model use them.
TEST(CostModel, MeasuredTuningIsSharedAndDrivesPredictions) {
  run_ranks(4,
            [](Communicator& comm) {
              const Tuning measured = measure_tuning(comm);
              // An entry for each transport in use: on 2 hosts, the one within and the one across.
              std::set<std::string> in_use, measured_names;
              for (int peer = 0; peer < comm.size(); ++peer)
                if (peer != comm.rank()) in_use.insert(comm.transport_to(peer));
              for (const auto& [name, c] : measured.transports) measured_names.insert(name);
              EXPECT_EQ(measured_names, in_use);
              ASSERT_EQ(measured.transports.size(), 2u);
              expect_measured_alike_on_every_rank(comm, measured);

              constexpr std::size_t kBytes = 64 << 20;
              comm.set_tuning(measured);
              const double with_measured = comm.predict_allreduce(kBytes, "ring").seconds;
              Tuning slower = measured;
              for (auto& [name, c] : slower.transports) c.bandwidth_gbs /= 10;
              comm.set_tuning(slower);
              EXPECT_GT(comm.predict_allreduce(kBytes, "ring").seconds, with_measured);
              comm.set_tuning(measured);
              EXPECT_EQ(comm.predict_allreduce(kBytes, "ring").seconds, with_measured);
              // A cache that holds the buffers: the rates measured in cache (here faster than
              // the others, which a loaded host may not have measured).
              Tuning large_cache = measured;
              for (auto& [name, c] : large_cache.transports) {
                c.cached_bandwidth_gbs = 10 * c.bandwidth_gbs;
                c.cached_reduce_gbs = 10 * c.reduce_gbs;
              }
              large_cache.last_level_cache_bytes = 64.0 * kBytes * comm.size();
              comm.set_tuning(large_cache);
              EXPECT_LT(comm.predict_allreduce(kBytes, "ring").seconds, with_measured);
            },
            {{"ARCOLL_EMULATED_HOSTS", "2"}, {"ARCOLL_TRANSPORT", "auto"}});
}

// "WITHIN+ACROSS" routes the pairs of a host and those across hosts apart, each to the
// transport named: tcp within two emulated hosts (where auto takes shm), and across them UCX
// where this build has it (where auto takes tcp).
TEST(Routing, PairsWithinAndAcrossHostsTakeTheTransportsNamed) {
  if (forced_transport() != "tcp") GTEST_SKIP() << "run on the tcp run: it names its own";
  const auto built = Communicator::transports();
  const std::string across =
      std::find(built.begin(), built.end(), "ucx") != built.end() ? "ucx" : "tcp";
  run_ranks(5,
            [&](Communicator& comm) {
              std::vector<std::int32_t> hosts(static_cast<std::size_t>(comm.size()));
              const std::int32_t mine = comm.node_id();
              comm.allgather(&mine, hosts.data(), 1, DataType::i32);
              ASSERT_EQ(comm.node_count(), 2);
              for (int peer = 0; peer < comm.size(); ++peer)
                if (peer != comm.rank())
                  EXPECT_EQ(comm.transport_to(peer),
                            hosts[static_cast<std::size_t>(peer)] == mine ? "tcp" : across)
                      << "peer " << peer;
              check_allreduce(comm, 5, Coverage::sampled);
            },
            {{"ARCOLL_EMULATED_HOSTS", "2"}, {"ARCOLL_TRANSPORT", "tcp+" + across}});
}

// One transport within hosts and across them: measured apart, its figures within hosts are
// those of the pairs within them (hierarchical's steps within a host), those across the
// rest. 2 emulated hosts over tcp (the tcp. run's test: cases_of_the_tcp_run).
TEST(CostModel, ATransportWithinAndAcrossHostsKeepsBothFigures) {
  run_ranks(4,
            [](Communicator& comm) {
              const Tuning measured = measure_tuning(comm);
              ASSERT_EQ(measured.transports.size(), 2u);
              ASSERT_EQ(measured.transports.count("tcp"), 1u);
              ASSERT_EQ(measured.transports.count(within_hosts_key("tcp")), 1u);
              expect_measured_alike_on_every_rank(comm, measured);
              // Links within hosts a hundred times the speed of those across: hierarchical,
              // which keeps most bytes within hosts, gains, and beats the ring, whose every
              // step waits for the pairs that cross.
              constexpr std::size_t kBytes = 64 << 20;
              Tuning fast_within = measured;
              TransportCosts& within = fast_within.transports.at(within_hosts_key("tcp"));
              within = fast_within.transports.at("tcp");
              within.bandwidth_gbs *= 100;
              within.cached_bandwidth_gbs *= 100;
              Tuning alike = fast_within;
              alike.transports.erase(within_hosts_key("tcp"));
              comm.set_tuning(alike);
              const double hierarchical = comm.predict_allreduce(kBytes, "hierarchical").seconds;
              comm.set_tuning(fast_within);
              const double faster = comm.predict_allreduce(kBytes, "hierarchical").seconds;
              EXPECT_LT(faster, 0.9 * hierarchical);
              EXPECT_LT(faster, comm.predict_allreduce(kBytes, "ring").seconds);
            },
            {{"ARCOLL_EMULATED_HOSTS", "2"}, {"ARCOLL_TRANSPORT", "tcp"}});
}

// Calibration on first use: the first job of a layout measures the link costs and keeps them
// in the cache folder, the next job reuses them (every rank the same figures), "now" measures
// again, "off" keeps the built-in figures, a damaged file is measured over, kept figures far
// slower than the links are now within hosts (measured while the host ran slow: in-cache rate
// or latency) are measured again, figures across hosts however slow are kept, figures kept
// under another UCX_TLS or on hosts of other names are not taken, and another value of
// ARCOLL_CALIBRATE is a configuration error.
TEST(CostModel, CalibrationIsMeasuredOnceThenKept) {
  const ScratchFolder scratch("arcoll-calibration");
  const std::string& folder = scratch.path();
  // `layout`: variables beside this run's that place the ranks and choose their transports;
  // `because`: what the source must also say (why kept figures were measured again).
  auto job = [&](const std::string& mode, const std::string& expected_source,
                 std::map<std::string, std::string> layout = {},
                 const std::string& because = "") {
    // from_env takes the built-in figures; the calibration under test comes next.
    layout.insert({{"ARCOLL_CACHE_DIR", folder}, {"ARCOLL_CALIBRATE", "off"}});
    run_ranks(
        3,
        [&](Communicator& comm) {
          ::setenv("ARCOLL_CALIBRATE", mode.c_str(), 1);
          const Calibration calibration = calibration_from_env();
          const CalibratedTuning calibrated = calibrated_tuning(comm, calibration);
          EXPECT_EQ(calibrated.source.rfind(expected_source, 0), 0u) << calibrated.source;
          EXPECT_NE(calibrated.source.find(because), std::string::npos) << calibrated.source;
          if (calibration == Calibration::off) {
            EXPECT_TRUE(calibrated.tuning.transports.empty());
            comm.barrier();  // rank 0's store stays up until every rank has joined
            return;
          }
          // An entry per transport in use (two on emulated hosts).
          ASSERT_FALSE(calibrated.tuning.transports.empty());
          expect_measured_alike_on_every_rank(comm, calibrated.tuning);
          comm.barrier();               // rank 0 has written the file
          const std::string file = calibrated.source.substr(calibrated.source.find(folder));
          const Tuning kept = load_tuning(file.substr(0, file.find(' ')));
          ASSERT_EQ(kept.transports.size(), calibrated.tuning.transports.size());
          for (const auto& [name, c] : calibrated.tuning.transports) {
            EXPECT_EQ(kept.transports.at(name).bandwidth_gbs, c.bandwidth_gbs) << name;
            EXPECT_EQ(kept.transports.at(name).small_bandwidth_gbs, c.small_bandwidth_gbs) << name;
          }
          EXPECT_EQ(kept.last_level_cache_bytes, calibrated.tuning.last_level_cache_bytes);
        },
        layout);
  };
  // The folder's one file; scale_kept multiplies its in-cache bandwidths and divides its
  // latencies: by 1000, the kept figures are faster than any look at the links finds (on a
  // busy test host, one measurement came out 20 times slower than the next); by much less than 1,
  // they look measured while the host ran slow.
  auto kept_file = [&] {
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(folder))
      files.push_back(entry.path().string());
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? std::string() : files.front();
  };
  auto scale_kept = [&](double factor) {
    Tuning tuning = load_tuning(kept_file());
    for (auto& [name, c] : tuning.transports) {
      c.cached_bandwidth_gbs *= factor;
      c.latency_us /= factor;
    }
    save_tuning(tuning, kept_file());
    return tuning;
  };
  job("cache", "link costs measured just now, kept in " + folder + "/tuning-");
  scale_kept(1000);
  job("cache", "link costs kept in " + folder + "/tuning-");
  // UCX's own choice of its transports steers its links (UCX_TLS=tcp between emulated hosts
  // on 1 Gbit/s, where UCX otherwise reads across their shared memory): figures kept under
  // another choice are not taken, and each choice keeps its own.
  if (forced_transport() == "ucx") {
    const std::map<std::string, std::string> over_tcp{{"UCX_TLS", "tcp"}};
    job("cache", "link costs measured just now, kept in " + folder + "/tuning-", over_tcp);
    job("cache", "link costs kept in " + folder + "/tuning-", over_tcp);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder),
                            std::filesystem::directory_iterator()),
              2);
    return;
  }
  // Each transport's figures are measured and kept; what the cache does with kept figures is
  // the same for all: the shm. run's check, and tcp's, which can also cross hosts.
  if (forced_transport() != "shm" && forced_transport() != "tcp") return;
  // A millionth of the figures measured (the file holds a thousand times them): what is
  // measured again, even in a moment when ranks share a core (exchanges some two thousand times
  // slower), is still far faster.
  const Tuning slow = scale_kept(1e-9);
  job("cache", "link costs measured again, kept in " + folder + "/tuning-");
  for (const auto& [name, c] : load_tuning(kept_file()).transports) {
    EXPECT_GT(c.cached_bandwidth_gbs, 3 * slow.transports.at(name).cached_bandwidth_gbs) << name;
    EXPECT_LT(3 * c.latency_us, slow.transports.at(name).latency_us) << name;
  }
  // tcp within and across two hosts (the tcp. run's check: the same in every run): its
  // figures within hosts are kept apart from those across; figures across however slow are
  // kept (a slow link is no slow moment), those within are looked at as any transport's.
  if (forced_transport() == "tcp") {
    std::filesystem::remove(kept_file());
    const std::map<std::string, std::string> tcp_on_two_hosts{{"ARCOLL_EMULATED_HOSTS", "2"},
                                                              {"ARCOLL_TRANSPORT", "tcp"}};
    job("cache", "link costs measured just now, kept in " + folder + "/tuning-", tcp_on_two_hosts);
    Tuning kept = load_tuning(kept_file());
    ASSERT_EQ(kept.transports.size(), 2u);
    // Those within hosts faster than any look finds (as scale_kept(1000)), those across far
    // slower.
    TransportCosts &across = kept.transports.at("tcp"),
                   &within = kept.transports.at(within_hosts_key("tcp"));
    across.cached_bandwidth_gbs *= 1e-3;
    across.latency_us *= 1e3;
    within.cached_bandwidth_gbs *= 1e3;
    within.latency_us /= 1e3;
    save_tuning(kept, kept_file());
    job("cache", "link costs kept in " + folder + "/tuning-", tcp_on_two_hosts);
    within.latency_us *= 1e9;  // a million times what was measured
    save_tuning(kept, kept_file());
    job("cache", "link costs measured again, kept in " + folder + "/tuning-", tcp_on_two_hosts,
        "exchanges of 8 bytes took");
    // The same layout on hosts of other names may be linked otherwise (two emulated clusters,
    // one of shaped links): measured anew, and kept beside.
    auto on_other_hosts = tcp_on_two_hosts;
    on_other_hosts["ARCOLL_NODE_ID"] = "elsewhere";
    job("cache", "link costs measured just now, kept in " + folder + "/tuning-", on_other_hosts);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(folder),
                            std::filesystem::directory_iterator()),
              2);
    return;
  }
  // The latency alone kept far slower: the same. A million times what was measured, as a
  // look at the links can itself meet a slow moment (ranks sharing a core: 8-byte exchanges
  // of 1.1-1.6 ms where 0.7 us was measured), and must still find the kept figure too slow.
  Tuning slow_latency = load_tuning(kept_file());
  for (auto& [name, c] : slow_latency.transports) c.latency_us *= 1e6;
  save_tuning(slow_latency, kept_file());
  job("cache", "link costs measured again, kept in " + folder + "/tuning-", {},
      "exchanges of 8 bytes took");
  for (const auto& [name, c] : load_tuning(kept_file()).transports)
    EXPECT_LT(3 * c.latency_us, slow_latency.transports.at(name).latency_us) << name;
  job("now", "link costs measured just now, kept in " + folder + "/tuning-");
  job("off", "built-in link costs");
  // A damaged file: measured over, and whole again.
  std::ofstream(kept_file()) << "{\"format\": ";
  job("cache", "link costs measured just now, kept in " + folder + "/tuning-");
  scale_kept(1000);
  job("cache", "link costs kept in " + folder + "/tuning-");
  run_ranks(2, [](Communicator& comm) {
    ::setenv("ARCOLL_CALIBRATE", "sometimes", 1);
    EXPECT_THROW(calibration_from_env(), ConfigurationError);
    comm.barrier();
  });
}

// A communicator made from the environment calibrates as arbench does (the C API and the torch
// backend go through the same source): its cost model predicts with the figures kept, and
// with the built-in ones under ARCOLL_CALIBRATE=off or with a tuning file, writing nothing.
TEST(CostModel, CommunicatorsFromTheEnvironmentUseTheKeptCalibration) {
  if (forced_transport() != "shm")
    GTEST_SKIP() << "the shm. run's test: a communicator finds its figures as on every transport";
  namespace fs = std::filesystem;
  const ScratchFolder scratch("arcoll-calibration");
  const std::string& folder = scratch.path();
  auto kept_files = [&] {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(folder))
      if (entry.path().extension() == ".json") files.push_back(entry.path().string());
    return files;
  };
  constexpr std::size_t kBytes = 1 << 20;
  for (const char* mode : {"off", "cache"}) {
    run_ranks(
        2,
        [&](Communicator& comm) {
          const Prediction made = comm.predict_allreduce(kBytes);
          comm.barrier();  // rank 0 has written its calibration, if any
          const std::vector<std::string> files = kept_files();
          if (std::string(mode) == "off") {
            EXPECT_TRUE(files.empty());
            return;
          }
          ASSERT_EQ(files.size(), 1u);
          comm.set_tuning(load_tuning(files[0]));
          EXPECT_EQ(comm.predict_allreduce(kBytes).seconds, made.seconds) << files[0];
          comm.set_tuning(Tuning{});
          EXPECT_NE(comm.predict_allreduce(kBytes).seconds, made.seconds)
              << "the built-in figures predict alike: the check above says nothing";
        },
        {{"ARCOLL_CACHE_DIR", folder}, {"ARCOLL_CALIBRATE", mode}});
  }
  // A tuning file wins: nothing measured, nothing more kept.
  const std::string tuning_file = kept_files().at(0);
  fs::rename(tuning_file, folder + "/given.tuning");
  run_ranks(
      2, [&](Communicator& comm) { comm.barrier(); },
      {{"ARCOLL_CACHE_DIR", folder}, {"ARCOLL_CALIBRATE", "cache"},
       {"ARCOLL_TUNING_FILE", folder + "/given.tuning"}});
  EXPECT_TRUE(kept_files().empty());
  // Another value: every rank fails to make its communicator, naming the variable.
  LocalLaunchOptions bad;
  bad.ranks = 2;
  bad.env = {{"ARCOLL_CALIBRATE", "sometimes"}};
  const auto exits = launch(bad, [] {
    try {
      Communicator::from_env();
    } catch (const ConfigurationError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 3;
    }
    return 0;
  });
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) {
    EXPECT_EQ(e.exit_code, 3) << e.describe() << "\n" << e.output;
    EXPECT_NE(e.output.find("ARCOLL_CALIBRATE"), std::string::npos) << e.output;
  }
}

// The cache folder keeps each host's calibrations last used: a new one removes the least
// recently used of this host's beyond 32, a kept one reused counts as used now; other hosts'
// files, other files and partial files still being written stay, abandoned ones go.
TEST(CostModel, CalibrationCacheKeepsTheLastUsed) {
  if (forced_transport() != "shm")
    GTEST_SKIP() << "the shm. run's test: the folder is kept alike for every transport";
  namespace fs = std::filesystem;
  const ScratchFolder scratch("arcoll-calibration");
  const std::string& folder = scratch.path();
  std::string host;  // as calibration files name it
  for (const char c : host_info().hostname)
    host += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '_';
  const auto now = fs::file_time_type::clock::now();
  auto file_used = [&](const std::string& name, int hours_ago) {
    std::ofstream(folder + "/" + name) << "{}";
    fs::last_write_time(folder + "/" + name, now - std::chrono::hours(hours_ago));
  };
  // 40 calibrations of this host's other builds, file i last used i hours ago.
  auto old_file = [&](int i) {
    char hash[17];
    std::snprintf(hash, sizeof hash, "%016x", i);
    return "tuning-" + host + "-2r1h-" + hash + ".json";
  };
  for (int i = 1; i <= 40; ++i) file_used(old_file(i), i);
  const std::string other_host = "tuning-" + host + "-b-2r1h-0000000000000001.json";
  const std::string abandoned = "tuning-" + host + "-2r1h-0000000000000001.json.77.partial";
  const std::string being_written = "tuning-" + host + "-2r1h-0000000000000002.json.78.partial";
  file_used(other_host, 100);
  file_used(abandoned, 2);
  file_used(being_written, 0);
  file_used("notes.txt", 100);
  // A job of `chunk` bytes per pipeline chunk (a layout of its own), told `expected_source`.
  auto job = [&](const std::string& chunk, const std::string& expected_source) {
    run_ranks(
        2,
        [&](Communicator& comm) {
          const CalibratedTuning calibrated = calibrated_tuning(comm, Calibration::cache);
          EXPECT_EQ(calibrated.source.rfind(expected_source, 0), 0u) << calibrated.source;
          comm.barrier();  // rank 0 has written or touched the file
        },
        {{"ARCOLL_CACHE_DIR", folder}, {"ARCOLL_CALIBRATE", "off"},
         {"ARCOLL_CHUNK_BYTES", chunk}});
  };
  auto ours_kept = [&] {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".json" && name != other_host) names.insert(name);
    }
    return names;
  };
  auto kept_old = [&](int i) { return ours_kept().count(old_file(i)) == 1; };
  job("512K", "link costs measured just now");
  std::set<std::string> kept = ours_kept();
  EXPECT_EQ(kept.size(), 32u);
  for (int i = 1; i <= 40; ++i) EXPECT_EQ(kept_old(i), i <= 31) << i;
  for (const std::string& name : {other_host, being_written, std::string("notes.txt")})
    EXPECT_TRUE(fs::exists(folder + "/" + name)) << name;
  EXPECT_FALSE(fs::exists(folder + "/" + abandoned));
  // The new calibration, made to look last used two days ago, is used again: it counts as
  // used now, so the next new calibration removes the oldest of the others instead. (Its
  // in-cache rate is raised and its latency lowered first, so that no look at the links finds
  // it measured slow.)
  std::string ours;
  for (const std::string& name : kept)
    if (name.find("-2r1h-00000000000000") == std::string::npos) ours = folder + "/" + name;
  ASSERT_FALSE(ours.empty());
  Tuning fast = load_tuning(ours);
  for (auto& [name, c] : fast.transports) {
    c.cached_bandwidth_gbs *= 1000;
    c.latency_us /= 1000;
  }
  save_tuning(fast, ours);
  fs::last_write_time(ours, now - std::chrono::hours(48));
  job("512K", "link costs kept in " + ours);
  job("256K", "link costs measured just now");
  EXPECT_EQ(ours_kept().size(), 32u);
  EXPECT_TRUE(fs::exists(ours));
  EXPECT_FALSE(kept_old(31));
  EXPECT_TRUE(kept_old(30));
}

// The model behind auto: predictions exist for every algorithm and auto takes the least.
TEST(CostModel, AutoTakesTheLeastPredictedTime) {
  run_ranks(4, [](Communicator& comm) {
    for (std::size_t bytes : {std::size_t{8}, std::size_t{64} << 10, std::size_t{64} << 20}) {
      const Prediction chosen = comm.predict_allreduce(bytes);
      for (const auto& name : Communicator::allreduce_algorithms()) {
        const Prediction p = comm.predict_allreduce(bytes, name);
        EXPECT_GT(p.seconds, 0) << name;
        // Equal up to rounding counts as a tie (see cost::best).
        EXPECT_LE(chosen.seconds, p.seconds * (1 + 1e-9)) << name << " at " << bytes << " B";
      }
    }
    EXPECT_EQ(comm.algorithm_name().rfind("auto: ", 0), 0u) << comm.algorithm_name();
    EXPECT_THROW(comm.predict_allreduce(8, "no_such_algorithm"), InvalidArgument);
    EXPECT_THROW(comm.set_algorithm("no_such_algorithm"), InvalidArgument);
    comm.set_algorithm("tree");
    EXPECT_EQ(comm.algorithm_name(), "tree");
    auto input = make_input(DataType::i32, ReduceOp::sum, comm.rank(), 1001, 8);
    comm.allreduce(input.data(), 1001, DataType::i32, ReduceOp::sum);
    EXPECT_EQ(count_wrong(input.data(), DataType::i32, ReduceOp::sum, comm.size(), 1001, 8), 0u);
  });
}

// Every collective's algorithms have predictions; auto's is the one of the algorithm a call
// runs, the same on every rank; names the model does not know are refused.
TEST(CostModel, EveryCollectiveIsPredicted) {
  run_ranks(3, [](Communicator& comm) {
    for (const char* collective : {"reduce_scatter", "allgather", "broadcast", "reduce",
                                   "gather", "scatter", "alltoall"}) {
      const auto names = Communicator::algorithms(collective);
      EXPECT_FALSE(names.empty()) << collective;
      for (std::size_t bytes : {std::size_t{96}, std::size_t{3} << 20}) {
        for (const auto& name : names)
          EXPECT_GT(comm.predict(collective, bytes, name).seconds, 0) << collective << " " << name;
        const Prediction chosen = comm.predict(collective, bytes);
        EXPECT_NE(std::find(names.begin(), names.end(), chosen.algorithm), names.end());
        // Every rank predicts the same.
        double seconds[3] = {};
        seconds[comm.rank()] = chosen.seconds;
        comm.allreduce(seconds, 3, DataType::f64, ReduceOp::sum);
        EXPECT_EQ(seconds[0], seconds[1]);
        EXPECT_EQ(seconds[0], seconds[2]);
      }
    }
    EXPECT_EQ(Communicator::algorithms("allreduce"), Communicator::allreduce_algorithms());
    EXPECT_THROW(Communicator::algorithms("sendrecv"), InvalidArgument);
    EXPECT_THROW(comm.predict("reduce", 8, "tree"), InvalidArgument);
    EXPECT_THROW(comm.predict("no_such_collective", 8), InvalidArgument);
  });
}

}  // namespace
}  // namespace arcoll::testing
