// The TCP transport's congestion control on real loopback connections: which algorithm each
// setting leaves a connection under, as the kernel reports it, and the error for one the
// kernel lacks.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>

#include "arcoll/error.hpp"
#include "arcoll/options.hpp"
#include "src/base/socket.hpp"
#include "transports/tcp/congestion.hpp"

namespace arcoll {
namespace {

// Both ends of one loopback connection.
struct LoopbackPair {
  LoopbackPair() {
    listener = net::listen_on("127.0.0.1", 0);
    std::string why;
    dialed = net::connect_until(net::local_endpoint(listener.get()),
                                net::Clock::now() + std::chrono::seconds(5), why);
    if (dialed) accepted.reset(::accept(listener.get(), nullptr, nullptr));
  }
  net::Fd listener, dialed, accepted;
};

TEST(TcpCongestion, PacingAlgorithmsAreBbrsOnly) {
  EXPECT_TRUE(tcp::paces("bbr"));
  EXPECT_TRUE(tcp::paces("bbr2"));
  EXPECT_FALSE(tcp::paces("cubic"));
  EXPECT_FALSE(tcp::paces("reno"));
  EXPECT_FALSE(tcp::paces(""));
}

TEST(TcpCongestion, ConnectionsWithinTheHostAreSeenSo) {
  LoopbackPair pair;
  ASSERT_TRUE(pair.dialed && pair.accepted);
  EXPECT_TRUE(net::within_host(pair.dialed.get()));
  EXPECT_TRUE(net::within_host(pair.accepted.get()));
  EXPECT_FALSE(net::within_host(pair.listener.get()));  // no peer
}

TEST(TcpCongestion, SystemKeepsTheKernelsChoiceAndANameIsSet) {
  LoopbackPair pair;
  ASSERT_TRUE(pair.dialed);
  const int fd = pair.dialed.get();
  const std::string system = net::congestion_control(fd);
  ASSERT_FALSE(system.empty());
  EXPECT_EQ(tcp::apply_congestion_control(fd, "system"), system);
  EXPECT_EQ(net::congestion_control(fd), system);
  // reno is built into every kernel, and root or not, the default list allows it; where it is
  // the system's, cubic (Debian's default) shows the change.
  const std::string other = system == "reno" ? "cubic" : "reno";
  EXPECT_EQ(tcp::apply_congestion_control(fd, other), other);
  EXPECT_EQ(net::congestion_control(fd), other);
}

TEST(TcpCongestion, AutoLeavesPacingWithinTheHost) {
  LoopbackPair pair;
  ASSERT_TRUE(pair.dialed);
  const int fd = pair.dialed.get();
  // Under bbr where the kernel has it, else under the system's algorithm.
  const bool bbr = net::set_congestion_control(fd, "bbr");
  const std::string before = net::congestion_control(fd);
  const std::string chosen = tcp::apply_congestion_control(fd, "auto");
  EXPECT_EQ(chosen, net::congestion_control(fd));
  EXPECT_FALSE(tcp::paces(chosen)) << "was " << before;
  if (!bbr) {
    EXPECT_EQ(chosen, before) << "no pacing algorithm to leave: the system's stays";
    GTEST_SKIP() << "this kernel has no bbr, or does not let this process choose it: the change "
                    "from a pacing algorithm is untested";
  }
}

TEST(TcpCongestion, AnAlgorithmTheKernelLacksIsAClearError) {
  LoopbackPair pair;
  ASSERT_TRUE(pair.dialed);
  const std::string before = net::congestion_control(pair.dialed.get());
  try {
    tcp::apply_congestion_control(pair.dialed.get(), "nosuchcc");
    FAIL() << "an unknown congestion control was accepted";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("ARCOLL_TCP_CONGESTION='nosuchcc'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("no such congestion control"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(net::congestion_control(pair.dialed.get()), before);
}

TEST(TcpCongestion, TheSettingIsReadFromTheEnvironmentAndChecked) {
  const char* outer = std::getenv("ARCOLL_TCP_CONGESTION");
  const std::optional<std::string> kept = outer ? std::optional<std::string>(outer) : std::nullopt;
  ::setenv("ARCOLL_TCP_CONGESTION", "cubic", 1);
  EXPECT_EQ(Options::from_env().tcp_congestion, "cubic");
  for (const char* bad : {"Cubic", "cubic;rm", "a_name_far_too_long"}) {
    ::setenv("ARCOLL_TCP_CONGESTION", bad, 1);
    EXPECT_THROW(Options::from_env(), ConfigurationError) << "'" << bad << "'";
  }
  ::unsetenv("ARCOLL_TCP_CONGESTION");
  EXPECT_EQ(Options::from_env().tcp_congestion, "auto");
  EXPECT_EQ(tcp_congestion_problem("auto"), "");
  EXPECT_NE(tcp_congestion_problem(""), "");  // as set in code: empty is no name
  if (kept) ::setenv("ARCOLL_TCP_CONGESTION", kept->c_str(), 1);
}

}  // namespace
}  // namespace arcoll
