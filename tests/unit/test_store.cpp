// The rendezvous store: set/get/add, waiting with deadlines, and garbage from strangers.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "arcoll/error.hpp"
#include "src/base/store.hpp"

namespace arcoll {
namespace {

using namespace std::chrono_literals;
using net::Clock;

const std::string kToken = "job-secret";

struct StoreFixture : ::testing::Test {
  StoreServer server{net::listen_on("127.0.0.1", 0), kToken};
  StoreClient client{server.endpoint(), Clock::now() + 5s, 0, kToken};
};

TEST_F(StoreFixture, SetThenGet) {
  client.set("a", "hello");
  EXPECT_EQ(client.get("a", Clock::now() + 1s), "hello");
  client.set("a", std::string(1000, 'x'));
  EXPECT_EQ(client.get("a", Clock::now() + 1s)->size(), 1000u);
  client.set("empty", "");
  EXPECT_EQ(client.get("empty", Clock::now() + 1s), "");
}

TEST_F(StoreFixture, GetWaitsForALaterSetFromAnotherClient) {
  std::thread writer([&] {
    StoreClient other(server.endpoint(), Clock::now() + 5s, 1, kToken);
    std::this_thread::sleep_for(100ms);
    other.set("late", "value");
  });
  auto start = Clock::now();
  EXPECT_EQ(client.get("late", Clock::now() + 5s), "value");
  EXPECT_GE(Clock::now() - start, 90ms);
  writer.join();
}

TEST_F(StoreFixture, GetOfAMissingKeyEndsAtItsDeadline) {
  auto start = Clock::now();
  EXPECT_EQ(client.get("never", Clock::now() + 300ms), std::nullopt);
  auto waited = Clock::now() - start;
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 3s);
}

TEST_F(StoreFixture, AddCounts) {
  EXPECT_EQ(client.add("n", 1), 1);
  EXPECT_EQ(client.add("n", 5), 6);
  EXPECT_EQ(client.add("n", -6), 0);
}

TEST_F(StoreFixture, OversizedKeysAreRefusedBeforeSending) {
  EXPECT_THROW(client.set(std::string(store_protocol::kMaxKey + 1, 'k'), "v"), InvalidArgument);
  EXPECT_THROW(client.set("", "v"), InvalidArgument);
  client.set("still", "works");
  EXPECT_EQ(client.get("still", Clock::now() + 1s), "works");
}

// Ranks joining together: each publishes its key and waits for everyone's, from its own
// thread (and under ThreadSanitizer, scripts/tsan.sh, against the server's thread).
TEST_F(StoreFixture, ManyClientsAtOnceSeeEveryKey) {
  constexpr int kClients = 8;
  std::vector<std::thread> ranks;
  std::vector<int> seen(kClients, 0);
  for (int r = 0; r < kClients; ++r)
    ranks.emplace_back([&, r] {
      StoreClient mine(server.endpoint(), Clock::now() + 5s, r, kToken);
      mine.set("rank/" + std::to_string(r), std::to_string(r * r));
      mine.add("joined", 1);
      for (int other = 0; other < kClients; ++other)
        if (mine.get("rank/" + std::to_string(other), Clock::now() + 5s) ==
            std::to_string(other * other))
          ++seen[static_cast<std::size_t>(r)];
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kClients; ++r)
    EXPECT_EQ(seen[static_cast<std::size_t>(r)], kClients) << "rank " << r;
  EXPECT_EQ(client.add("joined", 0), kClients);
}

TEST_F(StoreFixture, ClientsWithoutTheJobTokenAreRefused) {
  client.set("k", "v");
  for (const std::string& token : {std::string("guess"), std::string()}) {
    StoreClient stranger(server.endpoint(), Clock::now() + 5s, 7, token);
    // Told why, not left to guess that rank 0 crashed.
    try {
      stranger.get("k", Clock::now() + 1s);
      ADD_FAILURE() << "token '" << token << "' was let in";
    } catch (const ConfigurationError& e) {
      EXPECT_NE(std::string(e.what()).find("refused this process: wrong or missing job token"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(client.get("k", Clock::now() + 1s), "v");
}

TEST_F(StoreFixture, GarbageFromAStrangerDoesNotDisturbOthers) {
  for (const std::string& garbage :
       {std::string(100, '\xff'), std::string("ARKV") + std::string(60, '\x7f'),
        std::string(2, 'a')}) {
    std::string why;
    net::Fd fd = net::connect_until(server.endpoint(), Clock::now() + 1s, why);
    ASSERT_TRUE(fd) << why;
    ::send(fd.get(), garbage.data(), garbage.size(), MSG_NOSIGNAL);
  }
  client.set("k", "v");
  EXPECT_EQ(client.get("k", Clock::now() + 1s), "v");
}

TEST(StoreClient, UnreachableStoreTimesOutNamingRankZero) {
  // A port nobody listens on: bind one, note it, close it.
  net::Endpoint endpoint = net::local_endpoint(net::listen_on("127.0.0.1", 0).get());
  auto start = Clock::now();
  try {
    StoreClient client(endpoint, Clock::now() + 500ms, 3, kToken);
    FAIL() << "connected to a closed port";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
    EXPECT_EQ(e.rank(), 3);
  }
  EXPECT_LT(Clock::now() - start, 3s);
}

// Once the store's process is known to have gone, a wait on it ends at once, however long its
// deadline: in the handshake (what listens at the port now never answers) and in a get.
TEST(StoreClient, WaitsEndOnceTheStoresProcessIsKnownToHaveGone) {
  net::Fd gone(::eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(gone);
  auto say_gone_after = [&](std::chrono::milliseconds delay) {
    return std::thread([&gone, delay] {
      std::this_thread::sleep_for(delay);
      const std::uint64_t one = 1;
      ASSERT_EQ(::write(gone.get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
    });
  };
  net::Fd silent = net::listen_on("127.0.0.1", 0);  // accepts (in the kernel), never answers
  auto start = Clock::now();
  std::thread teller = say_gone_after(200ms);
  try {
    StoreClient client(net::local_endpoint(silent.get()), Clock::now() + 30s, 2, kToken, false,
                       gone.get());
    ADD_FAILURE() << "a handshake with a silent listener ended well";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.rank(), 2) << e.what();
    EXPECT_EQ(e.peer(), 0) << e.what();
  }
  teller.join();
  EXPECT_LT(Clock::now() - start, 10s);

  std::uint64_t drained = 0;
  ASSERT_EQ(::read(gone.get(), &drained, sizeof drained), static_cast<ssize_t>(sizeof drained));
  StoreServer server{net::listen_on("127.0.0.1", 0), kToken};
  StoreClient client(server.endpoint(), Clock::now() + 5s, 2, kToken, false, gone.get());
  start = Clock::now();
  teller = say_gone_after(200ms);
  try {
    (void)client.get("never", Clock::now() + 30s);
    ADD_FAILURE() << "a get past the store's end returned";
  } catch (const PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
    EXPECT_EQ(e.rank(), 2);
  }
  teller.join();
  EXPECT_LT(Clock::now() - start, 10s);

  // Once joined, the news no longer concerns the client: a late one ends no wait.
  client.finish_joining();
  EXPECT_EQ(client.get("never", Clock::now() + 300ms), std::nullopt);
}

}  // namespace
}  // namespace arcoll
