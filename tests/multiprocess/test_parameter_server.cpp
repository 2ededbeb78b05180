// The parameter server on real ranks over the suite's transport: bsp push_pull equal to the
// all-reduce reference for every type that sums, many counts and layouts (colocated and
// dedicated servers, 2 to 8 ranks, pieces cut small so that keys span servers); asp and ssp
// lose nothing and apply nothing twice; ssp keeps every worker within k clocks of the slowest;
// the sgd rule steps the weights as a local computation does; a killed worker and a killed
// server are named by every survivor within the timeout; an idle server leaves its core alone.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <thread>
#include <vector>

#include "arcoll/error.hpp"
#include "arcoll/parameter_server.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Layouts: ranks in all, and how many of them are dedicated servers (0: colocated).
struct Layout {
  int ranks;
  int servers;
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  return std::to_string(info.param.ranks) + "ranks_" +
         (info.param.servers == 0 ? std::string("colocated")
                                  : std::to_string(info.param.servers) + "servers");
}

ParameterServerOptions options_for(const Layout& layout, int world) {
  ParameterServerOptions options;
  // The last ranks serve, so that workers and servers interleave on emulated hosts.
  for (int s = 0; s < layout.servers; ++s) options.server_ranks.push_back(world - 1 - s);
  options.piece_bytes = 256;  // many pieces per key, spread over every server
  return options;
}

const DataType kSummable[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                              DataType::i8,  DataType::u8,  DataType::i32, DataType::i64};
const std::size_t kCounts[] = {0, 1, 7, 64, 97, 1000, 4099};

class BspWorld : public ::testing::TestWithParam<Layout> {};

TEST_P(BspWorld, PushPullEqualsTheAllreduceReference) {
  const Layout layout = GetParam();
  run_ranks(layout.ranks, [&](Communicator& comm) {
    ParameterServer ps(comm, options_for(layout, comm.size()));
    if (!ps.is_worker()) {
      ps.serve();
      return;
    }
    const int workers = ps.worker_count();
    ASSERT_EQ(workers, layout.ranks - layout.servers);
    std::uint64_t key = 0;
    for (DataType type : kSummable) {
      for (std::size_t count : kCounts) {
        ++key;
        ps.register_tensor(key, count, type);
        // Two steps: the second's sum must not mix with the first's.
        for (std::size_t step = 0; step < 2; ++step) {
          const std::size_t salt = key * 10 + step;
          auto input = make_input(type, ReduceOp::sum, ps.worker_index(), count, salt);
          std::vector<unsigned char> output(input.size(), 0xAB);
          ps.push_pull(key, input.data(), output.data());
          EXPECT_EQ(count_wrong(output.data(), type, ReduceOp::sum, workers, count, salt), 0u)
              << label(type, ReduceOp::sum, count, false) << " step " << step;
        }
      }
    }
    // Pieces spread over every server, balanced by bytes.
    std::vector<std::size_t> bytes(comm.size(), 0);
    for (std::uint64_t k = 1; k <= key; ++k)
      for (const auto& piece : ps.pieces(k)) bytes[static_cast<std::size_t>(piece.server)] += piece.count;
    for (int server : ps.server_ranks()) EXPECT_GT(bytes[static_cast<std::size_t>(server)], 0u) << server;
    ps.finish();
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, BspWorld,
                         ::testing::Values(Layout{1, 0}, Layout{2, 0}, Layout{3, 0}, Layout{5, 0},
                                           Layout{3, 1}, Layout{5, 2}, Layout{7, 4},
                                           Layout{8, 1}),
                         layout_name);

// Separate pushes and pulls, non-blocking, many outstanding: every worker pushes several
// times, each push a value of its own (1 + worker * pushes + push, times a factor per
// element), then a barrier; the state is exactly the sum of every push, so that a push lost,
// or applied twice, or both for two pushes, shows.
class AsynchronousWorld : public ::testing::TestWithParam<Layout> {};

void check_exact_sum(const Layout& layout, Consistency consistency) {
  run_ranks(layout.ranks, [&](Communicator& comm) {
    ParameterServerOptions options = options_for(layout, comm.size());
    options.consistency = consistency;
    options.staleness = 1;
    ParameterServer ps(comm, options);
    if (!ps.is_worker()) {
      ps.serve();
      return;
    }
    constexpr int kPushes = 6;
    const int workers = ps.worker_count();
    auto value = [](int worker, int push) { return double(1 + worker * kPushes + push); };
    for (DataType type : {DataType::i64, DataType::f32, DataType::i32}) {
      for (std::size_t count : {std::size_t(1), std::size_t(97), std::size_t(1000)}) {
        const std::uint64_t key = static_cast<std::uint64_t>(type) * 100000 + count;
        ps.register_tensor(key, count, type);
        const std::size_t bytes = count * size_of(type);
        std::vector<std::vector<unsigned char>> pushed(kPushes, std::vector<unsigned char>(bytes));
        std::vector<std::vector<unsigned char>> pulled(kPushes, std::vector<unsigned char>(bytes));
        std::vector<WorkPtr> works;
        for (int p = 0; p < kPushes; ++p) {
          auto& mine = pushed[static_cast<std::size_t>(p)];
          for (std::size_t i = 0; i < count; ++i)
            store(mine.data(), type, i, value(ps.worker_index(), p) * double(i % 7 + 1));
          works.push_back(ps.ipush(key, mine.data()));
          works.push_back(ps.ipull(key, pulled[static_cast<std::size_t>(p)].data()));
        }
        for (const WorkPtr& w : works) w->wait();
        ps.barrier();
        std::vector<unsigned char> state(bytes);
        ps.pull(key, state.data());
        double all = 0;
        for (int w = 0; w < workers; ++w)
          for (int p = 0; p < kPushes; ++p) all += value(w, p);
        for (std::size_t i = 0; i < count; ++i)
          ASSERT_EQ(load(state.data(), type, i), all * double(i % 7 + 1))
              << to_string(type) << " count " << count << " element " << i;
        // Each pull saw at least this worker's own pushes before it, never more than all.
        double own = 0;
        for (int p = 0; p < kPushes; ++p) {
          own += value(ps.worker_index(), p);
          const double seen = load(pulled[static_cast<std::size_t>(p)].data(), type, 0);
          EXPECT_GE(seen, own) << p;
          EXPECT_LE(seen, all) << p;
        }
        ps.barrier();  // no worker pushes the next key's... nothing of this one is left
      }
    }
    ps.finish();
  });
}

TEST_P(AsynchronousWorld, AspLosesNothingAndAppliesNothingTwice) {
  check_exact_sum(GetParam(), Consistency::asp);
}

TEST_P(AsynchronousWorld, SspLosesNothingAndAppliesNothingTwice) {
  check_exact_sum(GetParam(), Consistency::ssp);
}

INSTANTIATE_TEST_SUITE_P(Layouts, AsynchronousWorld,
                         ::testing::Values(Layout{2, 0}, Layout{4, 0}, Layout{3, 1}, Layout{6, 2}),
                         layout_name);

// SSP(2) with worker 0 slow: every pull a worker makes after its t-th push sees at least
// t - 2 pushes of every other worker, and the fast workers really wait for the slow one.
TEST(ParameterServer, SspKeepsEveryWorkerWithinItsStalenessOfTheSlowest) {
  run_ranks(4, [](Communicator& comm) {
    ParameterServerOptions options;
    options.consistency = Consistency::ssp;
    options.staleness = 2;
    ParameterServer ps(comm, options);
    constexpr int kSteps = 12;
    constexpr auto kSlowStep = std::chrono::milliseconds(40);
    const int workers = ps.worker_count();
    // Element w counts worker w's pushes.
    ps.register_tensor(1, static_cast<std::size_t>(workers), DataType::i64);
    std::vector<std::int64_t> push(static_cast<std::size_t>(workers), 0), pulled(push.size());
    push[static_cast<std::size_t>(ps.worker_index())] = 1;
    const auto start = Clock::now();
    for (int t = 1; t <= kSteps; ++t) {
      if (ps.worker_index() == 0) std::this_thread::sleep_for(kSlowStep);
      ps.push_pull(1, push.data(), pulled.data());
      for (int w = 0; w < workers; ++w) {
        EXPECT_GE(pulled[static_cast<std::size_t>(w)], t - options.staleness)
            << "worker " << ps.worker_index() << " at clock " << t << " saw worker " << w;
        EXPECT_LE(pulled[static_cast<std::size_t>(w)], kSteps);
      }
    }
    // A fast worker cannot end before the slow one has made kSteps - staleness steps.
    EXPECT_GE(Clock::now() - start, kSlowStep * (kSteps - options.staleness - 1));
    // Once all are done, every worker's pushes are there exactly.
    ps.barrier();
    ps.pull(1, pulled.data());
    for (int w = 0; w < workers; ++w) EXPECT_EQ(pulled[static_cast<std::size_t>(w)], kSteps) << w;
    ps.finish();
  });
}

// The sgd rule on a dedicated server (rank 3 of 4), keys cut into small pieces.
ParameterServerOptions sgd_on_rank_3(Consistency consistency, double momentum) {
  ParameterServerOptions options;
  options.server_ranks = {3};
  options.consistency = consistency;
  options.rule = ServerRule::sgd;
  options.learning_rate = 0.5;
  options.momentum = momentum;
  options.piece_bytes = 64;
  return options;
}

// The classic parameter server: bsp with the sgd rule holds weights that move by the mean
// gradient, with momentum, exactly as a local computation in f32.
TEST(ParameterServer, SgdRuleStepsTheWeightsByTheMeanGradient) {
  run_ranks(4, [](Communicator& comm) {
    ParameterServer ps(comm, sgd_on_rank_3(Consistency::bsp, 0.5));
    if (!ps.is_worker()) {
      ps.serve();
      return;
    }
    constexpr std::size_t kCount = 37;
    std::vector<float> initial(kCount), weights(kCount), velocity(kCount, 0.0f);
    for (std::size_t i = 0; i < kCount; ++i) initial[i] = weights[i] = float(i) / 4;
    ps.register_tensor(7, kCount, DataType::f32, initial.data());
    std::vector<float> pulled(kCount);
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> gradient(kCount);
      for (std::size_t i = 0; i < kCount; ++i) gradient[i] = float((ps.worker_index() + 1) * step) / 8;
      ps.push_pull(7, gradient.data(), pulled.data());
      const float mean_factor = float(ps.worker_count() + 1) / 2;  // mean of (w + 1)
      for (std::size_t i = 0; i < kCount; ++i) {
        velocity[i] = 0.5f * velocity[i] + mean_factor * float(step) / 8;
        weights[i] -= 0.5f * velocity[i];
        EXPECT_FLOAT_EQ(pulled[i], weights[i]) << "step " << step << " element " << i;
      }
    }
    ps.finish();
  });
}

// A worker or a server killed mid-run: every other rank fails naming it within the timeout.
void expect_named_after_kill(int victim, const std::vector<int>& servers) {
  LocalLaunchOptions options;
  options.ranks = 4;
  options.env = {{"ARCOLL_TIMEOUT", "8"}};
  options.failure_grace = std::chrono::seconds(30);
  auto exits = launch(options, [&] {
    auto comm = Communicator::from_env();
    ParameterServerOptions ps_options;
    ps_options.server_ranks = servers;
    ParameterServer ps(*comm, ps_options);
    const auto start = Clock::now();
    try {
      if (!ps.is_worker()) {
        if (comm->rank() == victim) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          ::raise(SIGKILL);
        }
        ps.serve();
        std::printf("served to the end although rank %d was killed\n", victim);
        return 3;
      }
      std::vector<float> data(5000, 1.0f), out(5000);
      ps.register_tensor(1, data.size(), DataType::f32);
      for (int step = 0; step < 100000; ++step) {
        if (comm->rank() == victim && step == 20) ::raise(SIGKILL);
        ps.push_pull(1, data.data(), out.data());
      }
    } catch (const Error& e) {
      std::printf("detected after %.2f s: %s\n",
                  std::chrono::duration<double>(Clock::now() - start).count(), e.what());
      return 0;
    }
    std::printf("no error although rank %d was killed\n", victim);
    return 3;
  });
  ASSERT_EQ(exits.size(), 4u);
  expect_survivors_named(exits, victim, 8.0 + 6.0);
}

TEST(ParameterServer, AKilledWorkerIsNamedByEveryOtherRank) { expect_named_after_kill(1, {3}); }
TEST(ParameterServer, AKilledServerIsNamedByEveryOtherRank) { expect_named_after_kill(3, {2, 3}); }
TEST(ParameterServer, AKilledColocatedRankIsNamedByEveryOtherRank) { expect_named_after_kill(2, {}); }

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Between steps a server share sleeps in the transports until a message or its worker's next
// call comes: its rank's core stays free for the collectives and the compute around it. The
// call after the pause wakes it and is served as usual.
TEST(ParameterServer, AnIdleServerLeavesTheCoreAloneAndWakesForTheNextCall) {
  run_ranks(3, [](Communicator& comm) {
    ParameterServer ps(comm, {});
    constexpr std::size_t kCount = 1000;
    ps.register_tensor(1, kCount, DataType::f64);
    std::vector<double> push(kCount, comm.rank() + 1.0), pulled(kCount);
    ps.push_pull(1, push.data(), pulled.data());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // past the loop's spinning
    const double cpu_before = cpu_seconds();
    const auto start = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double wall = std::chrono::duration<double>(Clock::now() - start).count();
    // Polling all the while would use a large part of a core: a few percent is wake-ups.
    EXPECT_LT(cpu_seconds() - cpu_before, 0.1 * wall) << "rank " << comm.rank();
    ps.push_pull(1, push.data(), pulled.data());
    const double sum = comm.size() * (comm.size() + 1) / 2.0;
    for (double v : pulled) ASSERT_EQ(v, sum);
    ps.finish();
  });
}

// ASP with the sgd rule (no momentum): each push steps the weights as it arrives, in whatever
// order, so the end is exactly the start less the learning rate times every push (values
// exact in f32: small integers, a rate of a power of two).
TEST(ParameterServer, AspSgdRuleAppliesEveryPushOnce) {
  run_ranks(4, [](Communicator& comm) {
    ParameterServer ps(comm, sgd_on_rank_3(Consistency::asp, 0.0));
    if (!ps.is_worker()) {
      ps.serve();
      return;
    }
    constexpr std::size_t kCount = 101;
    constexpr int kPushes = 5;
    std::vector<float> initial(kCount, 1000.0f);
    ps.register_tensor(7, kCount, DataType::f32, initial.data());
    std::vector<std::vector<float>> gradients(kPushes, std::vector<float>(kCount));
    std::vector<WorkPtr> works;
    for (int p = 0; p < kPushes; ++p) {
      for (std::size_t i = 0; i < kCount; ++i)
        gradients[p][i] = float((1 + ps.worker_index() * kPushes + p) * int(i % 3 + 1));
      works.push_back(ps.ipush(7, gradients[p].data()));
    }
    for (const WorkPtr& w : works) w->wait();
    ps.barrier();
    std::vector<float> weights(kCount);
    ps.pull(7, weights.data());
    double pushed = 0;
    for (int w = 0; w < ps.worker_count(); ++w)
      for (int p = 0; p < kPushes; ++p) pushed += 1 + w * kPushes + p;
    for (std::size_t i = 0; i < kCount; ++i)
      ASSERT_EQ(weights[i], float(1000.0 - 0.5 * pushed * double(i % 3 + 1))) << i;
    ps.finish();
  });
}

// Workers that register different keys, counts or types fail at once, every rank naming both
// registrations, instead of waiting for pieces that never come.
TEST(ParameterServer, RegistrationsThatDisagreeFailNamingBoth) {
  for (const int servers : {0, 1}) {
    LocalLaunchOptions options;
    options.ranks = 3;
    options.env = {{"ARCOLL_TIMEOUT", "60"}};
    options.failure_grace = std::chrono::seconds(50);
    auto exits = launch(options, [&] {
      auto comm = Communicator::from_env();
      ParameterServerOptions ps_options;
      if (servers == 1) ps_options.server_ranks = {2};
      try {
        ParameterServer ps(*comm, ps_options);
        if (!ps.is_worker()) {
          ps.serve();
          return 3;
        }
        ps.register_tensor(5, 10, DataType::f32);
        ps.register_tensor(ps.worker_index() == 1 ? 9 : 6, 10, DataType::f32);
      } catch (const Error& e) {
        std::printf("error: %s\n", e.what());
        return 0;
      }
      return 3;
    });
    for (const auto& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_LT(e.seconds, 20.0) << describe(exits);
      EXPECT_NE(e.output.find("registration #2"), std::string::npos) << e.output;
      EXPECT_NE(e.output.find("registers key 9"), std::string::npos) << e.output;
      EXPECT_NE(e.output.find("registers key 6"), std::string::npos) << e.output;
    }
  }
}

// Bad use is refused at once, on the rank that made it.
TEST(ParameterServer, BadCallsAreRefusedClearly) {
  run_ranks(2, [](Communicator& comm) {
    ParameterServerOptions bad;
    bad.server_ranks = {0, 1};
    EXPECT_THROW(ParameterServer(comm, bad), InvalidArgument);
    ParameterServer ps(comm, {});
    float x = 0;
    EXPECT_THROW(ps.push(42, &x), InvalidArgument);  // not registered
    ps.register_tensor(1, 1, DataType::f32);
    EXPECT_THROW(ps.register_tensor(1, 1, DataType::f32), InvalidArgument);
    EXPECT_THROW(ps.push(1, nullptr), InvalidArgument);
    ps.finish();
    EXPECT_THROW(ps.push(1, &x), InvalidArgument);  // finished
  });
}

}  // namespace
}  // namespace arcoll::testing
