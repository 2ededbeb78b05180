// Strangers at the TCP transport's listeners: garbage, and handshakes under a wrong job token
// or none, are rejected and logged by every rank while the job carries on, results right.
#include <gtest/gtest.h>

#include "tests/support/ranks.hpp"
#include "tests/support/strangers.hpp"
#include "transports/tcp/frame.hpp"

namespace arcoll::testing {
namespace {

TEST(TcpListener, StrangersAreRejectedAndTheJobCarriesOn) {
  if (forced_transport() != "tcp") GTEST_SKIP() << "the tcp. run's test";
  auto exits = job_beside_stranger([](StoreClient& store, const net::Endpoint&, std::mt19937& rng) {
    for (int r = 0; r < 3; ++r) {
      net::Endpoint listener;
      const auto address =
          store.get("tcp/" + std::to_string(r), net::Clock::now() + std::chrono::seconds(5));
      ASSERT_TRUE(address && net::parse_endpoint(*address, listener)) << "rank " << r;
      send_garbage(listener, rng, {"ARTH", "ARKV"});
      // A well-formed Hello, claiming to be the last rank of a 3-rank job.
      const tcp::Hello hello = tcp::make_hello(2, 3, 0, 0);
      for (const std::string& token : {std::string("guess"), std::string()})
        handshake_as_stranger(listener, token, "tcp",
                              {reinterpret_cast<const char*>(&hello), sizeof hello});
    }
  });
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_NE(e.output.find("tcp transport: rejected connection"), std::string::npos)
        << "rank " << e.rank << ":\n"
        << e.output;
    EXPECT_NE(e.output.find("wrong or missing job token"), std::string::npos)
        << "rank " << e.rank << ":\n"
        << e.output;
  }
}

}  // namespace
}  // namespace arcoll::testing
