// ARCOLL_TCP_CONGESTION on a job over TCP: auto leaves a pacing algorithm within a host where
// every rank has a core; a named algorithm runs on every connection of the transport, as the
// kernel reports it, with results unchanged; one the kernel lacks fails every rank's set-up,
// naming the variable.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "arcoll/host.hpp"
#include "src/base/socket.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"
#include "transports/tcp/congestion.hpp"

namespace arcoll::testing {
namespace {

// Connected TCP sockets of this process within the host, by congestion control.
std::map<std::string, int> host_connections_by_congestion() {
  std::map<std::string, int> found;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return found;
  while (const dirent* entry = ::readdir(dir)) {
    const int fd = std::atoi(entry->d_name);
    struct stat st {};
    if (entry->d_name[0] == '.' || ::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    const std::string algorithm = net::congestion_control(fd);
    if (!algorithm.empty() && net::within_host(fd)) ++found[algorithm];
  }
  ::closedir(dir);
  return found;
}

// Connections under an algorithm that does not pace.
int unpaced(const std::map<std::string, int>& found) {
  int count = 0;
  for (const auto& [algorithm, connections] : found)
    if (!tcp::paces(algorithm)) count += connections;
  return count;
}

TEST(TcpCongestionJob, AutoLeavesPacingWhereEveryRankHasACore) {
  if (forced_transport() != "tcp") GTEST_SKIP() << "the tcp. run's test";
  const std::string system = host_info().tcp_congestion;
  if (!tcp::paces(system))
    GTEST_SKIP() << "the system's " << system << " does not pace: auto keeps it";
  cpu_set_t cpus;
  ASSERT_EQ(::sched_getaffinity(0, sizeof cpus, &cpus), 0);
  const int cores = CPU_COUNT(&cpus);
  // A core per rank: the 2 connections to the peer leave pacing (the store's keep it).
  const std::map<std::string, std::string> automatic{{"ARCOLL_TCP_CONGESTION", "auto"}};
  if (cores >= 2)
    run_ranks(
        2, [](Communicator&) { EXPECT_GE(unpaced(host_connections_by_congestion()), 2); },
        automatic);
  // More ranks than cores: every connection keeps the system's.
  if (cores + 1 <= 8)
    run_ranks(
        cores + 1, [](Communicator&) { EXPECT_EQ(unpaced(host_connections_by_congestion()), 0); },
        automatic);
}

TEST(TcpCongestionJob, ANamedAlgorithmRunsOnEveryConnection) {
  if (forced_transport() != "tcp") GTEST_SKIP() << "the tcp. run's test";
  // One the store's connections (the system's) do not run: reno is in every kernel.
  const std::string system = host_info().tcp_congestion;
  const std::string named = system == "reno" ? "cubic" : "reno";
  run_ranks(3,
            [named](Communicator& comm) {
              // 2 sockets to each of 2 peers.
              EXPECT_GE(host_connections_by_congestion()[named], 4);
              for (std::size_t count : {std::size_t{1}, std::size_t{100003}}) {
                auto data = make_input(DataType::f32, ReduceOp::sum, comm.rank(), count, 5);
                comm.allreduce(data.data(), count, DataType::f32, ReduceOp::sum);
                EXPECT_EQ(
                    count_wrong(data.data(), DataType::f32, ReduceOp::sum, comm.size(), count, 5),
                    0u);
              }
            },
            {{"ARCOLL_TCP_CONGESTION", named}});
}

TEST(TcpCongestionJob, AnAlgorithmTheKernelLacksFailsEveryRankAtOnce) {
  if (forced_transport() != "tcp") GTEST_SKIP() << "the tcp. run's test";
  LocalLaunchOptions options;
  options.ranks = 3;
  options.output = RankOutput::capture;
  options.env = {{"ARCOLL_TCP_CONGESTION", "nosuchcc"}};
  const auto start = std::chrono::steady_clock::now();
  const auto exits = launch_refused_joins(options);
  EXPECT_LT(seconds_since(start), 20.0);
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_NE(e.output.find("refused: "), std::string::npos) << e.output;
    EXPECT_NE(e.output.find("ARCOLL_TCP_CONGESTION='nosuchcc'"), std::string::npos) << e.output;
  }
}

}  // namespace
}  // namespace arcoll::testing
