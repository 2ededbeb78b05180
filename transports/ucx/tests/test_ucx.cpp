// UCX's own cases, on the ucx run only (tests/CMakeLists.txt: cases_of_the_ucx_run).
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "arcoll/local_launcher.hpp"
#include "tests/support/ranks.hpp"

namespace arcoll::testing {
namespace {

// A choice of UCX's transports that leaves none, or none that reaches the peers, fails every
// rank at once saying what chose them, not at the first call's timeout.
TEST(UcxSetup, TransportsThatReachNoPeerFailEveryRankAtOnceSayingWhy) {
  if (forced_transport() != "ucx") GTEST_SKIP() << "run on the ucx run only";
  for (const auto& [tls, said] : {std::pair{"self", "no transport UCX may use reaches rank "},
                                  std::pair{"no_such_transport", "UCX may use none"}}) {
    SCOPED_TRACE(std::string("UCX_TLS=") + tls);
    LocalLaunchOptions options;
    options.ranks = 3;
    options.env = {{"UCX_TLS", tls}, {"ARCOLL_TIMEOUT", "30"}};
    auto exits = launch_refused_joins(options);
    for (const auto& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_LT(e.seconds, 5.0) << describe(exits);
      EXPECT_NE(e.output.find(said), std::string::npos) << e.output;
      EXPECT_NE(e.output.find(std::string("under UCX_TLS=") + tls), std::string::npos) << e.output;
    }
  }
}

}  // namespace
}  // namespace arcoll::testing
