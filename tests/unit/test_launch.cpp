// Rank, size and rendezvous address from each launcher's variables.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "arcoll/error.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/local_launcher.hpp"
#include "arcoll/options.hpp"

namespace arcoll {
namespace {

const char* const kAllVariables[] = {"ARCOLL_RANK",
                                     "ARCOLL_WORLD_SIZE",
                                     "ARCOLL_MASTER_ADDR",
                                     "ARCOLL_MASTER_PORT",
                                     "ARCOLL_LOCAL_RANK",
                                     "ARCOLL_LOCAL_SIZE",
                                     "ARCOLL_STORE_LISTEN_FD",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                     "SLURM_PROCID",
                                     "SLURM_NTASKS",
                                     "SLURM_LOCALID",
                                     "SLURM_NTASKS_PER_NODE",
                                     "PMI_RANK",
                                     "PMI_SIZE",
                                     "PMIX_RANK",
                                     "PMIX_SIZE",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "LOCAL_WORLD_SIZE",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "ARCOLL_TIMEOUT",
                                     "ARCOLL_CHUNK_BYTES",
                                     "ARCOLL_SOCKETS_PER_PEER",
                                     "ARCOLL_SHM_SINGLE_COPY_BYTES",
                                     "ARCOLL_STREAMING_BYTES",
                                     "ARCOLL_COPY_STREAMING_BYTES"};

struct CleanEnvironment : ::testing::Test {
  void SetUp() override {
    for (const char* name : kAllVariables) ::unsetenv(name);
  }
  void TearDown() override { SetUp(); }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }
};

TEST_F(CleanEnvironment, NothingSetIsAWorldOfOne) {
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.source, "default");
}

TEST_F(CleanEnvironment, OurOwnVariablesComeFirst) {
  set("ARCOLL_RANK", "2");
  set("ARCOLL_WORLD_SIZE", "4");
  set("ARCOLL_MASTER_ADDR", "10.1.2.3");
  set("ARCOLL_MASTER_PORT", "4000");
  set("RANK", "0");
  set("WORLD_SIZE", "9");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "arcoll");
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.master_addr, "10.1.2.3");
  EXPECT_EQ(info.master_port, 4000);
}

TEST_F(CleanEnvironment, Torchrun) {
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "2");
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", "29500");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "torchrun");
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_size, 2);
  EXPECT_EQ(info.master_port, 29501);  // torch's store keeps MASTER_PORT itself
}

TEST_F(CleanEnvironment, SlurmAndPmi) {
  set("SLURM_PROCID", "3");
  set("SLURM_NTASKS", "8");
  set("SLURM_LOCALID", "1");
  set("ARCOLL_MASTER_ADDR", "node1");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "slurm");
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  SetUp();
  set("PMI_RANK", "1");
  set("PMI_SIZE", "3");
  set("ARCOLL_MASTER_ADDR", "node1");
  EXPECT_EQ(detect_launch().source, "pmi");
}

TEST_F(CleanEnvironment, OpenMpiWithAddress) {
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  set("ARCOLL_MASTER_ADDR", "127.0.0.1");
  LaunchInfo info = detect_launch();
  EXPECT_EQ(info.source, "openmpi");
  EXPECT_EQ(info.local_size, 2);
  EXPECT_EQ(info.master_port, 29511);  // the default
}

TEST_F(CleanEnvironment, MissingAddressNamesTheVariable) {
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  try {
    detect_launch();
    FAIL() << "expected a configuration error";
  } catch (const ConfigurationError& e) {
    EXPECT_NE(std::string(e.what()).find("ARCOLL_MASTER_ADDR"), std::string::npos) << e.what();
  }
}

TEST_F(CleanEnvironment, InconsistentOrMalformedValuesAreRejected) {
  set("ARCOLL_RANK", "4");
  set("ARCOLL_WORLD_SIZE", "4");
  EXPECT_THROW(detect_launch(), ConfigurationError);
  set("ARCOLL_RANK", "x");
  EXPECT_THROW(detect_launch(), ConfigurationError);
  SetUp();
  set("ARCOLL_RANK", "0");
  EXPECT_THROW(detect_launch(), ConfigurationError);  // no world size
}

TEST_F(CleanEnvironment, OptionsFromEnvironment) {
  set("ARCOLL_TIMEOUT", "2.5");
  set("ARCOLL_CHUNK_BYTES", "64K");
  set("ARCOLL_SOCKETS_PER_PEER", "4");
  set("ARCOLL_SHM_SINGLE_COPY_BYTES", "256K");
  set("ARCOLL_SHM_SINGLE_COPY_PIPELINED_BYTES", "2M");
  Options o = Options::from_env();
  EXPECT_EQ(o.timeout.count(), 2500);
  EXPECT_EQ(o.chunk_bytes, 65536u);
  EXPECT_EQ(o.sockets_per_peer, 4);
  EXPECT_EQ(o.shm_single_copy_bytes, 262144u);
  EXPECT_EQ(o.shm_single_copy_pipelined_bytes, 2097152u);
  set("ARCOLL_SHM_SINGLE_COPY_BYTES", "big");
  EXPECT_THROW(Options::from_env(), ConfigurationError);
  set("ARCOLL_SHM_SINGLE_COPY_BYTES", "0");
  EXPECT_EQ(Options::from_env().streaming_bytes, std::size_t{16} << 20);  // the default
  set("ARCOLL_STREAMING_BYTES", "0");
  EXPECT_EQ(Options::from_env().streaming_bytes, 0u);
  set("ARCOLL_STREAMING_BYTES", "lots");
  EXPECT_THROW(Options::from_env(), ConfigurationError);
  set("ARCOLL_STREAMING_BYTES", "4M");
  EXPECT_EQ(Options::from_env().streaming_bytes, std::size_t{4} << 20);
  EXPECT_FALSE(Options::from_env().copy_streaming_bytes);  // the default: auto
  set("ARCOLL_COPY_STREAMING_BYTES", "0");
  EXPECT_EQ(Options::from_env().copy_streaming_bytes, 0u);
  set("ARCOLL_COPY_STREAMING_BYTES", "64M");
  EXPECT_EQ(Options::from_env().copy_streaming_bytes, std::size_t{64} << 20);
  set("ARCOLL_COPY_STREAMING_BYTES", "auto");
  EXPECT_FALSE(Options::from_env().copy_streaming_bytes);
  set("ARCOLL_COPY_STREAMING_BYTES", "most");
  EXPECT_THROW(Options::from_env(), ConfigurationError);
  set("ARCOLL_COPY_STREAMING_BYTES", "auto");
  EXPECT_EQ(Options::from_env().shm_ring_stores, ShmRingStores::automatic);  // the default
  set("ARCOLL_SHM_RING_STORES", "streaming");
  EXPECT_EQ(Options::from_env().shm_ring_stores, ShmRingStores::streaming);
  set("ARCOLL_SHM_RING_STORES", "cached");
  EXPECT_EQ(Options::from_env().shm_ring_stores, ShmRingStores::cached);
  set("ARCOLL_SHM_RING_STORES", "nt");
  EXPECT_THROW(Options::from_env(), ConfigurationError);
  set("ARCOLL_SHM_RING_STORES", "auto");
  set("ARCOLL_TIMEOUT", "-1");
  EXPECT_THROW(Options::from_env(), ConfigurationError);
  // Past a week the deadline would overflow the clock: refused, not failing later.
  set("ARCOLL_TIMEOUT", "1e10");
  EXPECT_THROW(Options::from_env(), ConfigurationError);
  set("ARCOLL_TIMEOUT", "604800");
  EXPECT_EQ(Options::from_env().timeout, kMaxTimeout);
  set("ARCOLL_TIMEOUT", "0.0001");
  EXPECT_EQ(Options::from_env().timeout.count(), 1);  // a fraction is not a zero timeout
  set("ARCOLL_TIMEOUT", "1");
  set("ARCOLL_CHUNK_BYTES", "12Q");
  EXPECT_THROW(Options::from_env(), ConfigurationError);
}

TEST(ByteSize, Suffixes) {
  EXPECT_EQ(parse_byte_size("8"), 8u);
  EXPECT_EQ(parse_byte_size("1K"), 1024u);
  EXPECT_EQ(parse_byte_size("256M"), 256u << 20);
  EXPECT_EQ(parse_byte_size("2G"), 2ull << 30);
  EXPECT_EQ(parse_byte_size("4KiB"), 4096u);
  EXPECT_EQ(parse_byte_size("16kb"), 16384u);
  EXPECT_EQ(parse_byte_size(""), std::nullopt);
  EXPECT_EQ(parse_byte_size("K"), std::nullopt);
  EXPECT_EQ(parse_byte_size("12Q"), std::nullopt);
  EXPECT_EQ(parse_byte_size("-1"), std::nullopt);
  EXPECT_EQ(parse_byte_size("99999999999999999999G"), std::nullopt);
}

// The local launcher ends a job whose rank failed while another is stopped (or hung): it
// terminates the stopped one once the grace period has passed, says so, and the job fails.
TEST(LocalLauncher, TerminatesARankStillRunningAfterAnotherFailed) {
  LocalLaunchOptions options;
  options.ranks = 3;
  options.output = RankOutput::capture;
  options.failure_grace = std::chrono::milliseconds(500);
  options.kill_grace = std::chrono::milliseconds(500);
  const auto start = std::chrono::steady_clock::now();
  const auto exits = run_local_ranks(options, [] {
    const char* rank = std::getenv("ARCOLL_RANK");
    if (std::string(rank) == "1") ::raise(SIGSTOP);
    if (std::string(rank) == "0") {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return 3;
    }
    return 0;
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_EQ(exits[0].exit_code, 3);
  EXPECT_TRUE(exits[2].ok());
  EXPECT_FALSE(exits[0].killed_by_launcher);
  EXPECT_FALSE(exits[2].killed_by_launcher);
  EXPECT_TRUE(exits[1].killed_by_launcher);
  EXPECT_EQ(exits[1].signal, SIGTERM);  // continued, it acted on SIGTERM: no SIGKILL needed
  EXPECT_NE(exits[1].describe().find("rank 1 was still running after another rank had failed"),
            std::string::npos)
      << exits[1].describe();
  // 0.2 s to the failure, the 0.5 s grace, and the launcher's 20 ms polls.
  EXPECT_LT(seconds, 3.0);
}

// A rank that ignores SIGTERM is killed kill_grace later.
TEST(LocalLauncher, KillsARankThatIgnoresTermination) {
  LocalLaunchOptions options;
  options.ranks = 2;
  options.output = RankOutput::capture;
  options.failure_grace = std::chrono::milliseconds(200);
  options.kill_grace = std::chrono::milliseconds(300);
  const auto exits = run_local_ranks(options, [] {
    if (std::string(std::getenv("ARCOLL_RANK")) == "0") return 1;
    ::signal(SIGTERM, SIG_IGN);
    for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[1].killed_by_launcher);
  EXPECT_EQ(exits[1].signal, SIGKILL);
}

}  // namespace
}  // namespace arcoll
