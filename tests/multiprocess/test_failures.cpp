// A job must never hang: a rank that dies or never comes makes every other rank fail within
// the timeout with an error naming it, and strangers' bytes on our ports change nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "arcoll/error.hpp"
#include "src/auth.hpp"
#include "src/socket.hpp"
#include "src/store.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"
#include "transports/tcp/frame.hpp"

namespace arcoll::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Shared-memory segments of arcoll jobs present now.
std::set<std::string> arcoll_segments() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().rfind("arcoll-", 0) == 0)
      names.insert(entry.path().filename().string());
  return names;
}

// Segments present now but not `before` that stay for 2 s: a job's segments are unlinked once
// mapped, so those of jobs still starting (other tests running alongside) go away soon.
std::set<std::string> leaked_segments(const std::set<std::string>& before) {
  std::set<std::string> left;
  for (int attempt = 0; attempt < 20; ++attempt) {
    left.clear();
    for (const auto& name : arcoll_segments())
      if (before.count(name) == 0) left.insert(name);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return left;
}

// Runs large allreduces (4 MiB: the single-copy path of shm) until one throws; prints the
// error and how long detection took.
int allreduce_until_error(Communicator& comm, int kill_rank, int kill_after) {
  std::vector<float> buffer(1024 * 1024, 1.0f);
  for (int i = 0; i < 100000; ++i) {
    if (comm.rank() == kill_rank && i == kill_after) ::raise(SIGKILL);
    const auto start = Clock::now();
    try {
      comm.allreduce(buffer.data(), buffer.size(), DataType::f32, ReduceOp::sum);
      std::fill(buffer.begin(), buffer.end(), 1.0f);
    } catch (const Error& e) {
      std::printf("detected after %.2f s: %s\n", seconds_since(start), e.what());
      return 0;
    }
  }
  std::printf("no error although rank %d was killed\n", kill_rank);
  return 3;
}

class KilledRank : public ::testing::TestWithParam<int> {};

TEST_P(KilledRank, EverySurvivorFailsPromptlyNamingIt) {
  const int victim = GetParam();
  LocalLaunchOptions options;
  options.ranks = 4;
  options.env = {{"ARCOLL_TIMEOUT", "10"}};
  options.failure_grace = std::chrono::seconds(30);
  const auto segments_before = arcoll_segments();
  auto exits = launch(options, [&] {
    auto comm = Communicator::from_env();
    return allreduce_until_error(*comm, victim, 5);
  });
  // Segments are unlinked once mapped: the killed rank left nothing behind.
  for (const auto& name : leaked_segments(segments_before))
    ADD_FAILURE() << "left in /dev/shm: " << name;
  ASSERT_EQ(exits.size(), 4u);
  EXPECT_EQ(exits[static_cast<std::size_t>(victim)].signal, SIGKILL) << describe(exits);
  const std::string name = "rank " + std::to_string(victim);
  for (const auto& e : exits) {
    if (e.rank == victim) continue;
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_FALSE(e.killed_by_launcher) << describe(exits);
    EXPECT_NE(e.output.find("detected after"), std::string::npos) << describe(exits);
    EXPECT_NE(e.output.find(name), std::string::npos)
        << "rank " << e.rank << " did not name " << name << ":\n"
        << e.output;
    EXPECT_LT(e.seconds, 10.0 + 5.0) << describe(exits);
  }
}

INSTANTIATE_TEST_SUITE_P(Victims, KilledRank, ::testing::Values(0, 2));

// Seeded trials: a random rank of a random world is SIGKILLed at a random moment while every
// rank runs all-reduces of random sizes with one algorithm, on two emulated hosts (so that
// hierarchical crosses both levels). Every survivor must fail within the timeout naming the
// victim (directly, or through the abort of a rank that saw it first), leave no shared-memory
// segment behind, and exit cleanly. Prints the detection times (median and max).
class KillTrials : public ::testing::TestWithParam<std::string> {};

TEST_P(KillTrials, SurvivorsFailPromptlyNamingTheVictim) {
  if (!transport_forced("tcp") && !transport_forced("shm"))
    GTEST_SKIP() << "run on tcp. and shm. only: each transport once is what the trials are for";
  const std::string algorithm = GetParam();
  constexpr int kTrials = 20;
  constexpr double kTimeout = 10;
  std::vector<double> detections;
  const auto segments_before = arcoll_segments();
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
        std::printf("detected after %.4f s: %s\n", seconds_since(start), e.what());
        if (killer.joinable()) killer.detach();
        return 0;
      }
      return 3;
    });
    ASSERT_EQ(exits.size(), static_cast<std::size_t>(world));
    EXPECT_EQ(exits[static_cast<std::size_t>(victim)].signal, SIGKILL) << describe(exits);
    const std::string name = "rank " + std::to_string(victim);
    for (const auto& e : exits) {
      if (e.rank == victim) continue;
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_NE(e.output.find(name), std::string::npos)
          << "rank " << e.rank << " did not name " << name << ":\n"
          << e.output;
      const auto at = e.output.find("detected after ");
      if (at != std::string::npos) detections.push_back(std::atof(e.output.c_str() + at + 15));
    }
  }
  for (const auto& name : leaked_segments(segments_before))
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
bool poke(const net::Endpoint& endpoint, const std::string& bytes) {
  std::string why;
  net::Fd fd = net::connect_until(endpoint, Clock::now() + std::chrono::seconds(2), why);
  if (!fd) return false;
  ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return true;
}

// Answers the listener's challenge at `endpoint` correctly but under `token`, as the store's
// first request or a TCP rank's Hello (claiming to be the last rank of a 3-rank job).
void handshake_as_stranger(const net::Endpoint& endpoint, const std::string& token, bool store) {
  std::string why;
  net::Fd fd = net::connect_until(endpoint, Clock::now() + std::chrono::seconds(1), why);
  auth::Challenge challenge{};
  if (!fd || !net::read_all(fd.get(), &challenge, sizeof challenge,
                            Clock::now() + std::chrono::seconds(1), "stranger"))
    return;
  const tcp::Hello hello = tcp::make_hello(2, 3, 0, 0);
  const std::string_view said =
      store ? std::string_view()
            : std::string_view(reinterpret_cast<const char*>(&hello), sizeof hello);
  const auth::Mac mac = auth::answer(token, store ? "store" : "tcp", challenge, said);
  std::string bytes(said);
  bytes.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

TEST(Strangers, RandomBytesOnOurPortsAreRejectedAndTheJobCarriesOn) {
  LocalLaunchOptions options;
  options.ranks = 3;
  options.env = {{"ARCOLL_TIMEOUT", "20"}};
  auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    std::atomic<bool> stranger_done{comm->rank() != 1};
    std::thread stranger;
    if (comm->rank() == 1) {
      stranger = std::thread([&stranger_done] {
        std::mt19937 rng(42);
        auto random_bytes = [&](std::size_t n) {
          std::string s(n, '\0');
          for (auto& c : s) c = static_cast<char>(rng());
          return s;
        };
        net::Endpoint store{std::getenv("ARCOLL_MASTER_ADDR"),
                            std::atoi(std::getenv("ARCOLL_MASTER_PORT"))};
        // The stranger thread lives in a rank: it reads the addresses as a rank would.
        StoreClient reader(store, Clock::now() + std::chrono::seconds(5), 1,
                           std::getenv("ARCOLL_JOB_TOKEN"));
        std::vector<net::Endpoint> targets{store};
        for (int r = 0; r < 3 && transport_forced("tcp"); ++r) {
          net::Endpoint e;
          net::parse_endpoint(
              *reader.get("tcp/" + std::to_string(r), Clock::now() + std::chrono::seconds(5)), e);
          targets.push_back(e);
        }
        for (const auto& t : targets) {
          for (int round = 0; round < 5; ++round) poke(t, random_bytes(1 + rng() % 8192));
          poke(t, std::string(3, 'x'));  // a truncated header, then silence
          // Well-formed magic with nonsense behind it.
          std::string hello = random_bytes(64);
          std::memcpy(hello.data(), "ARTH", 4);
          poke(t, hello);
          std::string store_request = random_bytes(64);
          std::memcpy(store_request.data(), "ARKV", 4);
          poke(t, store_request);
          // A well-formed handshake under a wrong token, and under none.
          for (const std::string& token : {std::string("guess"), std::string()})
            handshake_as_stranger(t, token, t.port == store.port);
        }
        stranger_done = true;
      });
    }
    // The job goes on until the stranger has said everything, and a while after, so that
    // every listener has seen its connections.
    std::size_t wrong = 0;
    int after = 0;
    for (int i = 0; after < 20; ++i) {
      std::int32_t done = stranger_done ? 1 : 0;
      comm->allreduce(&done, 1, DataType::i32, ReduceOp::min);
      if (done == 1) ++after;
      const std::size_t count = 1 + static_cast<std::size_t>(i % 300) * 37;
      auto data = make_input(DataType::f32, ReduceOp::sum, comm->rank(), count,
                             static_cast<std::size_t>(i));
      comm->allreduce(data.data(), count, DataType::f32, ReduceOp::sum);
      wrong += count_wrong(data.data(), DataType::f32, ReduceOp::sum, comm->size(), count,
                           static_cast<std::size_t>(i));
    }
    if (stranger.joinable()) stranger.join();
    comm->barrier();
    std::printf("wrong elements: %zu\n", wrong);
    return wrong == 0 ? 0 : 5;
  });
  std::string all_output;
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    all_output += e.output;
  }
  // Rejections were logged by the store (rank 0) and by every rank's TCP transport, those of
  // the handshakes under a wrong token as such.
  EXPECT_NE(all_output.find("rendezvous store: rejected connection"), std::string::npos)
      << all_output;
  EXPECT_NE(all_output.find("wrong or missing job token"), std::string::npos) << all_output;
  for (int r = 0; r < 3 && transport_forced("tcp"); ++r)
    EXPECT_NE(exits[static_cast<std::size_t>(r)].output.find("tcp transport: rejected connection"),
              std::string::npos)
        << "rank " << r << ":\n"
        << exits[static_cast<std::size_t>(r)].output;
}

}  // namespace
}  // namespace arcoll::testing
