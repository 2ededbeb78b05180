// A job must never hang: a rank that dies or never comes makes every other rank fail within
// the timeout with an error naming it, and strangers' bytes on our ports change nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "arcoll/error.hpp"
#include "src/base/socket.hpp"
#include "src/base/store.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"
#include "tests/support/strangers.hpp"

namespace arcoll::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Makes `call` until it throws, rank `kill_rank` killing itself before its call number
// `kill_after`; prints the error and how long detection took.
int until_error(Communicator& comm, int kill_rank, int kill_after,
                const std::function<void(Communicator&)>& call) {
  for (int i = 0; i < 100000; ++i) {
    if (comm.rank() == kill_rank && i == kill_after) ::raise(SIGKILL);
    const auto start = Clock::now();
    try {
      call(comm);
    } catch (const Error& e) {
      std::printf("detected after %.2f s: %s\n", seconds_since(start), e.what());
      return 0;
    }
  }
  std::printf("no error although rank %d was killed\n", kill_rank);
  return 3;
}

// Large allreduces (4 MiB: the single-copy path of shm).
int allreduce_until_error(Communicator& comm, int kill_rank, int kill_after) {
  std::vector<float> buffer(1024 * 1024, 1.0f);
  return until_error(comm, kill_rank, kill_after, [&](Communicator& c) {
    c.allreduce(buffer.data(), buffer.size(), DataType::f32, ReduceOp::sum);
    std::fill(buffer.begin(), buffer.end(), 1.0f);
  });
}

// A job of `ranks` in which one is killed: the others' calls end within `timeout_seconds`.
LocalLaunchOptions with_a_kill(int ranks, const char* timeout_seconds) {
  LocalLaunchOptions options;
  options.ranks = ranks;
  options.env = {{"ARCOLL_TIMEOUT", timeout_seconds}};
  options.failure_grace = std::chrono::seconds(30);
  return options;
}

class KilledRank : public ::testing::TestWithParam<int> {};

TEST_P(KilledRank, EverySurvivorFailsPromptlyNamingIt) {
  const int victim = GetParam();
  const auto segments_before = arcoll_segments();
  auto exits = launch(with_a_kill(4, "10"), [&] {
    auto comm = Communicator::from_env();
    return allreduce_until_error(*comm, victim, 5);
  });
  // Segments are unlinked once mapped: the killed rank left nothing behind.
  for (const auto& name : leaked_segments(segments_before, exits))
    ADD_FAILURE() << "left in /dev/shm: " << name;
  ASSERT_EQ(exits.size(), 4u);
  expect_survivors_named(exits, victim, 10.0 + 5.0);
}

INSTANTIATE_TEST_SUITE_P(Victims, KilledRank, ::testing::Values(0, 2));

// Sends and receives of 8 B between 2 ranks (with a core each, so that their waits first poll
// the transport without reading the clock: Engine::wait): a rank killed between two of them
// makes the other fail promptly naming it.
TEST(KilledPeer, SmallSendrecvsFailPromptlyNamingIt) {
  constexpr int kVictim = 1;
  auto exits = launch(with_a_kill(2, "10"), [&] {
    auto comm = Communicator::from_env();
    const int peer = 1 - comm->rank();
    std::uint64_t out = 0, in = 0;
    return until_error(*comm, kVictim, 1000, [&](Communicator& c) {
      ++out;
      c.sendrecv(&out, sizeof out, peer, &in, sizeof in, peer);
      if (in != out) std::_Exit(4);  // a wrong value: the rank fails the test
    });
  });
  ASSERT_EQ(exits.size(), 2u);
  expect_survivors_named(exits, kVictim, 10.0 + 5.0);
}

// Seeded trials: a random rank of a random world is SIGKILLed at a random moment while every
// rank runs all-reduces of random sizes with one algorithm, on two emulated hosts (so that
// hierarchical crosses both levels). Every survivor must fail within the timeout naming the
// victim (directly, or through the abort of a rank that saw it first), give back its sockets
// and threads, leave no shared-memory segment behind, and exit cleanly. Prints the detection times
// (median and max).
class KillTrials : public ::testing::TestWithParam<std::string> {};

TEST_P(KillTrials, SurvivorsFailPromptlyNamingTheVictim) {
  if (!chosen_transports())
    GTEST_SKIP() << "run on the runs that name their transports only: each transport once is "
                    "what the trials are for";
  const std::string algorithm = GetParam();
  constexpr int kTrials = 12;
  constexpr double kTimeout = 10;
  std::vector<double> detections;
  const auto segments_before = arcoll_segments();
  std::vector<RankExit> every_trial;
  for (int seed = 1; seed <= kTrials; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const int world = 3 + static_cast<int>(rng() % 3);
    const int victim = static_cast<int>(rng() % static_cast<unsigned>(world));
    const auto kill_after = std::chrono::microseconds(rng() % 40000);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + std::to_string(world) + " ranks, rank " +
                 std::to_string(victim) + " killed after " + std::to_string(kill_after.count()) +
                 " us");
    LocalLaunchOptions options;
    options.ranks = world;
    options.env = {
        {"ARCOLL_TIMEOUT", "10"}, {"ARCOLL_ALGO", algorithm}, {"ARCOLL_EMULATED_HOSTS", "2"}};
    options.failure_grace = std::chrono::seconds(30);
    auto exits = launch(options, [&] {
      // The clock starts once every rank has joined: a death while ranks are still connecting
      // is MissingRank's and KilledRank's case.
      auto start = Clock::now();
      std::thread killer;
      const int descriptors = open_descriptors(), threads = thread_count();
      try {
        auto comm = Communicator::from_env();
        comm->barrier();
        if (comm->rank() == victim)
          killer = std::thread([&] {
            std::this_thread::sleep_for(kill_after);
            ::raise(SIGKILL);
          });
        std::vector<float> buffer(1 << 18);
        std::mt19937 shared(static_cast<unsigned>(seed));  // the same sizes on every rank
        for (int i = 0; i < 1000000; ++i) {
          const std::size_t count = 1 + shared() % buffer.size();
          start = Clock::now();
          comm->allreduce(buffer.data(), count, DataType::f32, ReduceOp::sum);
        }
      } catch (const Error& e) {
        // The communicator, destroyed on the way here, gave back every socket and thread
        // (rank 0 had one descriptor more before: the launcher's listening socket it took).
        std::printf("detected after %.4f s: %s\n", seconds_since(start), e.what());
        if (killer.joinable()) killer.detach();  // the victim failing before its kill
        if (!back_to(descriptors, threads)) {
          std::printf("kept %d descriptors and %d threads\n", open_descriptors() - descriptors,
                      thread_count() - threads);
          return 6;
        }
        return 0;
      }
      return 3;
    });
    ASSERT_EQ(exits.size(), static_cast<std::size_t>(world));
    every_trial.insert(every_trial.end(), exits.begin(), exits.end());
    EXPECT_EQ(exits[static_cast<std::size_t>(victim)].signal, SIGKILL) << describe(exits);
    const std::string name = "rank " + std::to_string(victim);
    for (const auto& e : exits) {
      if (e.rank == victim) continue;
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_NE(e.output.find(name), std::string::npos)
          << "rank " << e.rank << " did not name " << name << "; every rank:\n"
          << describe(exits);
      const double detected = number_after(e.output, "detected after ");
      if (detected >= 0) detections.push_back(detected);
    }
  }
  for (const auto& name : leaked_segments(segments_before, every_trial))
    ADD_FAILURE() << "left in /dev/shm: " << name;
  ASSERT_FALSE(detections.empty());
  std::sort(detections.begin(), detections.end());
  const double median = detections[detections.size() / 2], worst = detections.back();
  std::printf("%s: %zu survivors of %d kills detected the failure in median %.4f s, max %.4f s\n",
              algorithm.c_str(), detections.size(), kTrials, median, worst);
  EXPECT_LT(worst, kTimeout + 1);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, KillTrials, ::testing::Values("ring", "tree", "hierarchical"));

TEST(MissingRank, ThoseThatStartedFailWithinTheTimeoutNamingIt) {
  LocalLaunchOptions options;
  options.ranks = 4;
  options.started_ranks = 3;  // rank 3 never starts
  options.env = {{"ARCOLL_TIMEOUT", "3"}};
  auto exits = launch(options, [] {
    const auto start = Clock::now();
    try {
      auto comm = Communicator::from_env();
    } catch (const TimeoutError& e) {
      std::printf("after %.2f s: %s\n", seconds_since(start), e.what());
      return seconds_since(start) < 3.0 + 2.0 ? 0 : 4;
    }
    return 3;
  });
  ASSERT_EQ(exits.size(), 3u);
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_NE(e.output.find("rank(s) 3 of 4 did not join"), std::string::npos) << e.output;
  }
}

// Writes `bytes` to `endpoint` from a stranger's connection; returns false if it could not
// connect at all.
// The rendezvous store's port; each transport's listeners have a test of their own
// (transports/<name>/tests/).
TEST(Strangers, RandomBytesOnTheStorePortAreRejectedAndTheJobCarriesOn) {
  auto exits = job_beside_stranger([](StoreClient&, const net::Endpoint& store, std::mt19937& rng) {
    send_garbage(store, rng, {"ARKV"});
    for (const std::string& token : {std::string("guess"), std::string()})
      handshake_as_stranger(store, token, "store", {});
  });
  std::string all_output;
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    all_output += e.output;
  }
  // Rejections were logged by the store (rank 0), those of the handshakes under a wrong token
  // as such.
  EXPECT_NE(all_output.find("rendezvous store: rejected connection"), std::string::npos)
      << all_output;
  EXPECT_NE(all_output.find("wrong or missing job token"), std::string::npos) << all_output;
}

// Runs `call` on 3 ranks, rank 2 with `odd` = true, then a barrier; every rank must fail
// (none may pass silently, hang or crash) and a rank that saw the mismatch must name both
// calls. Ranks whose part of the call ended before the mismatch showed (a broadcast's root)
// learn of it in their next call.
// A mismatch where no rank sends what another receives (each waits for the others) ends by the
// timeout (`deadlock`), every rank naming its own call, unless the ranks share the boards: then
// the rooted call's check, which looks at them while it waits, names both calls at once.
void expect_mismatch_reported(const std::function<void(Communicator&, bool odd)>& call,
                              const std::vector<std::string>& expected, bool deadlock = false,
                              const std::map<std::string, std::string>& env = {}) {
  LocalLaunchOptions options;
  options.ranks = 3;
  options.env = env;
  options.env["ARCOLL_TIMEOUT"] = deadlock ? "2" : "10";
  auto exits = launch(options, [&] {
    try {
      // Inside: a rank still joining when another aborts fails here.
      auto comm = Communicator::from_env();
      call(*comm, comm->rank() == 2);
      comm->barrier();
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      return 0;
    }
    return 2;
  });
  // A deadlock's ranks time out about together, each naming its own call: look at all.
  std::string all_output;
  for (const auto& e : exits) all_output += e.output;
  auto names_both = [&](const std::string& output) {
    bool all = deadlock || output.find("call mismatch") != std::string::npos;
    for (const std::string& text : expected) all = all && output.find(text) != std::string::npos;
    return all;
  };
  bool named = deadlock && names_both(all_output);
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    named = named || (!deadlock && names_both(e.output));
  }
  EXPECT_TRUE(named) << "no rank named both calls: " << describe(exits);
  if (deadlock) {
    for (const auto& e : exits)
      EXPECT_TRUE(e.output.find("ARCOLL_TIMEOUT") != std::string::npos ||
                  e.output.find("call mismatch") != std::string::npos)
          << describe(exits);
  }
}

TEST(Errors, MismatchedCallsAreReportedNamingBothSides) {
  std::vector<float> buffer(1000, 1.0f);
  // Counts: the buffers differ in size.
  expect_mismatch_reported(
      [&](Communicator& comm, bool odd) {
        comm.allreduce(buffer.data(), odd ? 999 : 1000, DataType::f32, ReduceOp::sum);
      },
      {"allreduce of 999 f32 (sum", "allreduce of 1000 f32 (sum"});
  // Same bytes, other type: without the signature this would reduce garbage silently.
  expect_mismatch_reported(
      [&](Communicator& comm, bool odd) {
        comm.allreduce(buffer.data(), 1000, odd ? DataType::i32 : DataType::f32, ReduceOp::sum);
      },
      {"allreduce of 1000 i32", "allreduce of 1000 f32"});
  // Same bytes and type, other op: a silently wrong result otherwise.
  expect_mismatch_reported(
      [&](Communicator& comm, bool odd) {
        comm.allreduce(buffer.data(), 1000, DataType::f32, odd ? ReduceOp::max : ReduceOp::sum);
      },
      {"(max", "(sum"});
  // Another collective: in trees, rank 2 waits in a broadcast for rank 1, ranks 0 and 1 wait
  // in an all-reduce for rank 2; without the boards nothing moves until the timeout. (A ring
  // all-reduce would send to rank 2 and be told of the mismatch.)
  expect_mismatch_reported(
      [&](Communicator& comm, bool odd) {
        if (odd)
          comm.broadcast(buffer.data(), 1000, DataType::f32, 0);
        else
          comm.allreduce(buffer.data(), 1000, DataType::f32, ReduceOp::sum);
      },
      {"broadcast #1 on rank 2", "allreduce #1 on rank"}, true, {{"ARCOLL_ALGO", "tree"}});
  // Another root.
  expect_mismatch_reported(
      [&](Communicator& comm, bool odd) {
        comm.broadcast(buffer.data(), 1000, DataType::f32, odd ? 1 : 0);
      },
      {"(root 1", "(root 0"});
}

// Each fault, with one algorithm at a time, on two emulated hosts (so that hierarchical
// crosses both levels). Run on each transport's own run, like KillTrials.
class Faults : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!chosen_transports())
      GTEST_SKIP() << "run on the runs that name their transports only: each transport once is "
                      "what the faults are for";
  }
  LocalLaunchOptions options(int ranks, std::map<std::string, std::string> env = {}) const {
    LocalLaunchOptions o;
    o.ranks = ranks;
    o.env = std::move(env);
    o.env.emplace("ARCOLL_TIMEOUT", "20");
    o.env["ARCOLL_ALGO"] = GetParam();
    o.env["ARCOLL_EMULATED_HOSTS"] = "2";
    o.failure_grace = std::chrono::seconds(30);
    return o;
  }
};

long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
      .count();
}

// A watchdog thread of a random rank calls abort() at a random moment while every rank runs
// all-reduces of random sizes: the victim's own call fails at once and every other rank's
// fails promptly (the timeout is 20 s) naming the victim and its reason. The steady clock is
// the machine's, so the ranks' timestamps compare.
TEST_P(Faults, AbortFromAnyRankFailsTheOthersPromptly) {
  std::vector<double> detections;
  for (int seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const int world = 3 + static_cast<int>(rng() % 3);
    const int victim = static_cast<int>(rng() % static_cast<unsigned>(world));
    const auto abort_after = std::chrono::microseconds(rng() % 20000);
    SCOPED_TRACE("seed " + std::to_string(seed) + ": " + std::to_string(world) + " ranks, rank " +
                 std::to_string(victim) + " aborts");
    auto exits = launch(options(world), [&] {
      auto comm = Communicator::from_env();
      std::thread watchdog;
      if (comm->rank() == victim)
        watchdog = std::thread([&] {
          std::this_thread::sleep_for(abort_after);
          std::printf("abort at %lld us\n", now_us());
          std::fflush(stdout);
          comm->abort("the watchdog gave up");
        });
      int status = 3;
      try {
        // The start's barrier is inside the try: an early abort may reach a rank still in it.
        comm->barrier();
        std::vector<float> buffer(1 << 18);
        std::mt19937 shared(static_cast<unsigned>(seed));
        for (int i = 0; i < 1000000; ++i)
          comm->allreduce(buffer.data(), 1 + shared() % buffer.size(), DataType::f32,
                          ReduceOp::sum);
      } catch (const Error& e) {
        std::printf("failed at %lld us: %s\n", now_us(), e.what());
        status = 0;
      }
      if (watchdog.joinable()) watchdog.join();
      return status;
    });
    ASSERT_EQ(exits.size(), static_cast<std::size_t>(world));
    const long long aborted =
        number_after(exits[static_cast<std::size_t>(victim)].output, "abort at ");
    EXPECT_NE(exits[static_cast<std::size_t>(victim)].output.find("abort() called"),
              std::string::npos)
        << describe(exits);
    for (const auto& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_NE(e.output.find("the watchdog gave up"), std::string::npos) << e.output;
      if (e.rank == victim) continue;
      EXPECT_NE(e.output.find("rank " + std::to_string(victim) + " aborted"), std::string::npos)
          << e.output;
      const double failed = number_after(e.output, "failed at ");
      if (aborted > 0 && failed > 0) detections.push_back((failed - aborted) / 1e6);
    }
  }
  ASSERT_FALSE(detections.empty());
  std::sort(detections.begin(), detections.end());
  std::printf("%s: %zu ranks saw another's abort after median %.4f s, max %.4f s\n",
              GetParam().c_str(), detections.size(), detections[detections.size() / 2],
              detections.back());
  EXPECT_LT(detections.back(), 2.0);  // well under the 20 s timeout
}

// A rank that does not come: the others' calls end at their deadline, naming the call with
// its sequence number, the rank each waited for, and the rank that was not in the call. The
// deadline is per call: a longer one lets a late rank through, a shorter one ends the wait sooner
// than ARCOLL_TIMEOUT (20 s).
TEST_P(Faults, DeadlinesArePerCallAndNameTheSilentRank) {
  constexpr int kLate = 1;
  auto exits = launch(options(3), [&] {
    auto comm = Communicator::from_env();
    return allreduces_with_a_late_rank(*comm, kLate);
  });
  bool named = false;
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_NE(e.output.find("allreduce #3"), std::string::npos) << e.output;
    named = named || e.output.find("ranks not waiting in this call: " + std::to_string(kLate) +
                                   "\n") != std::string::npos;
    if (e.rank == kLate) continue;
    const double waited = std::atof(e.output.c_str() + e.output.find("after ") + 6);
    EXPECT_GT(waited, 0.35) << e.output;
    EXPECT_LT(waited, 1.4) << e.output;  // before rank 1 came
  }
  EXPECT_TRUE(named) << describe(exits);
}

// ARCOLL_CHECKSUM: results stay right with it on; a bit flipped in one message
// (ARCOLL_FAULT_CORRUPT, as a bad link would) fails the receiving rank naming the link, and
// every other rank through its abort.
TEST_P(Faults, ChecksumCatchesCorruptionNamingTheLink) {
  run_ranks(
      4,
      [](Communicator& comm) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099},
                                  std::size_t{131101}}) {
          for (auto [type, op] :
               {std::pair{DataType::f32, ReduceOp::sum}, std::pair{DataType::i64, ReduceOp::max}}) {
            auto data = make_input(type, op, comm.rank(), count, count);
            comm.allreduce(data.data(), count, type, op);
            EXPECT_EQ(count_wrong(data.data(), type, op, comm.size(), count, count), 0u)
                << label(type, op, count, true);
          }
        }
        std::int32_t token = comm.rank() == 0 ? 42 : 0;
        if (comm.rank() == 0) comm.send(&token, sizeof token, 1);
        if (comm.rank() == 1) {
          comm.recv(&token, sizeof token, 0);
          EXPECT_EQ(token, 42);
        }
      },
      {{"ARCOLL_CHECKSUM", "1"}, {"ARCOLL_ALGO", GetParam()}, {"ARCOLL_EMULATED_HOSTS", "2"}});

  for (int seed = 1; seed <= 2; ++seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    const int corrupted = static_cast<int>(rng() % 4);
    const int nth = 1 + static_cast<int>(rng() % 12);
    SCOPED_TRACE("rank " + std::to_string(corrupted) + ", message " + std::to_string(nth));
    auto exits = launch(
        options(4,
                {{"ARCOLL_CHECKSUM", "1"},
                 {"ARCOLL_FAULT_CORRUPT", std::to_string(corrupted) + ":" + std::to_string(nth)}}),
        [&] {
          auto comm = Communicator::from_env();
          try {
            std::vector<float> buffer(100000, 1.0f);
            for (int i = 0; i < 100; ++i)
              comm->allreduce(buffer.data(), buffer.size(), DataType::f32, ReduceOp::sum);
          } catch (const Error& e) {
            std::printf("error: %s\n", e.what());
            return 0;
          }
          return 3;
        });
    const std::string link_prefix = "on the link from rank ";
    const std::string& reporter = exits[static_cast<std::size_t>(corrupted)].output;
    EXPECT_NE(reporter.find("checksum mismatch"), std::string::npos) << reporter;
    // The link's own transport: the run's one, or one of WITHIN+ACROSS.
    const std::string over = " to rank " + std::to_string(corrupted) + " over ";
    const std::size_t named = reporter.find(over);
    ASSERT_NE(named, std::string::npos) << reporter;
    const std::size_t from = named + over.size();
    const std::string link_transport = reporter.substr(from, reporter.find(' ', from) - from);
    const std::string choice = "+" + *chosen_transports() + "+";
    EXPECT_NE(choice.find("+" + link_transport + "+"), std::string::npos) << reporter;
    for (const auto& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_NE(e.output.find(link_prefix), std::string::npos) << e.output;
    }
  }
}

TEST_P(Faults, MismatchedCountsAreReportedNamingBothSides) {
  std::vector<float> buffer(100000, 1.0f);
  expect_mismatch_reported(
      [&](Communicator& comm, bool odd) {
        comm.allreduce(buffer.data(), odd ? 99999 : 100000, DataType::f32, ReduceOp::sum);
      },
      {"allreduce of 99999 f32 (sum", "allreduce of 100000 f32 (sum"}, false,
      {{"ARCOLL_ALGO", GetParam()}, {"ARCOLL_EMULATED_HOSTS", "2"}});
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Faults, ::testing::Values("ring", "tree", "hierarchical"));

// Settings that shape messages, and the world size, must agree: a rank that differs fails at
// the rendezvous naming the setting, instead of misreading messages later (or, for the world
// size, waiting out the timeout for a rank that never comes).
TEST(Settings, ARankWithOtherMessageSettingsFailsAtTheRendezvous) {
  struct Differing {
    const char* name;
    const char* value;
    std::string said;
  };
  for (const Differing& d :
       {Differing{"ARCOLL_CHECKSUM", "1", "ARCOLL_CHECKSUM is 1 on this rank but 0 on rank 0"},
        Differing{"ARCOLL_CHUNK_BYTES", "1M",
                  "ARCOLL_CHUNK_BYTES is 1048576 on this rank but 524288 on rank 0"},
        Differing{"ARCOLL_TCP_CONGESTION", "reno",
                  "ARCOLL_TCP_CONGESTION is reno on this rank but auto on rank 0"},
        Differing{"ARCOLL_WORLD_SIZE", "4", "world size is 4 on this rank but 3 on rank 0"}}) {
    LocalLaunchOptions options;
    options.ranks = 3;
    options.env = {{"ARCOLL_TIMEOUT", "20"}};
    auto exits = launch(options, [&] {
      if (std::string(std::getenv("ARCOLL_RANK")) == "2") ::setenv(d.name, d.value, 1);
      try {
        auto comm = Communicator::from_env();
        comm->barrier();
      } catch (const Error& e) {
        std::printf("error: %s\n", e.what());
        return 0;
      }
      return 3;
    });
    ASSERT_EQ(exits.size(), 3u);
    EXPECT_NE(exits[2].output.find(d.said), std::string::npos) << exits[2].output;
    // The others learn it from the rendezvous instead of waiting out the timeout.
    for (const auto& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_NE(e.output.find(d.said.substr(0, d.said.find(" on this rank"))), std::string::npos)
          << e.output;
      EXPECT_LT(e.seconds, 10.0) << describe(exits);
    }
  }
}

}  // namespace
}  // namespace arcoll::testing
