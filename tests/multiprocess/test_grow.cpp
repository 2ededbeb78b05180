// Growing a running group: processes that join through a member's rendezvous_address() with the
// job's token are appended by the members' grow(), and the grown communicator computes right; a
// stranger without the token is refused and changes nothing; a replacement for a lost rank joins
// the survivors; members that await newcomers who never come fail within the timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "arcoll/error.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

// A process started before the member's communicator (so that it forks no thread of it): it
// reads the group's address from a pipe, then runs `body` on it; its exit code is the body's.
struct Newcomer {
  pid_t pid = -1;
  int address_pipe = -1;
};

Newcomer start_newcomer(int (*body)(const std::string& address)) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    char address[128] = {};
    const ssize_t got = ::read(fds[0], address, sizeof address - 1);
    ::_exit(got > 0 ? body(address) : 20);
  }
  ::close(fds[0]);
  return {pid, fds[1]};
}

void send_address(const Newcomer& n, const std::string& address) {
  EXPECT_EQ(::write(n.address_pipe, address.c_str(), address.size()),
            static_cast<ssize_t>(address.size()));
  ::close(n.address_pipe);
}

int exit_code_of(const Newcomer& n) {
  int status = 0;
  ::waitpid(n.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

// Runs `members` ranks (rank 0 first starts `newcomers` processes that run `newcomer`), each
// running `body` on its communicator, with the newcomers on rank 0; checks every exit.
void run_with_newcomers(int members, int newcomers, int (*newcomer)(const std::string& address),
                        const std::function<void(Communicator&, std::vector<Newcomer>&)>& body,
                        int victim = -1) {
  LocalLaunchOptions options;
  options.ranks = members;
  options.env = {{"ARCOLL_TIMEOUT", "30"}};
  options.failure_grace = std::chrono::seconds(60);
  auto exits = launch(options, [&] {
    std::vector<Newcomer> started;
    if (std::getenv("ARCOLL_RANK") == std::string("0"))
      for (int i = 0; i < newcomers; ++i) started.push_back(start_newcomer(newcomer));
    auto comm = Communicator::from_env();
    body(*comm, started);
    for (const Newcomer& n : started) EXPECT_EQ(exit_code_of(n), 0);
    return 0;
  });
  for (const auto& e : exits)
    if (e.rank == victim)
      EXPECT_EQ(e.signal, SIGKILL) << describe(exits);
    else
      EXPECT_TRUE(e.ok()) << describe(exits);
}

// The grown group's sum of (rank + 1) over all ranks, and each rank's place.
int check_group(Communicator& comm, int expected_size) {
  if (comm.size() != expected_size) return 11;
  std::int64_t value = comm.rank() + 1;
  comm.allreduce(&value, 1, DataType::i64, ReduceOp::sum);
  if (value != static_cast<std::int64_t>(expected_size) * (expected_size + 1) / 2) return 12;
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(comm.size()));
  const std::int32_t mine = comm.rank();
  comm.allgather(&mine, ranks.data(), 1, DataType::i32);
  for (int r = 0; r < comm.size(); ++r)
    if (ranks[static_cast<std::size_t>(r)] != r) return 13;
  return 0;
}

int join_a_group_of_five(const std::string& address) {
  try {
    auto comm = Communicator::join(address, std::getenv("ARCOLL_JOB_TOKEN"), Options::from_env());
    if (comm->rank() < 3) return 14;
    if (const int wrong = check_group(*comm, 5)) return wrong;
    check_allreduce(*comm, 3, Coverage::sampled);  // as the members do
    return ::testing::Test::HasFailure() ? 17 : 0;
  } catch (const Error& e) {
    std::printf("newcomer: %s\n", e.what());
    return 15;
  }
}

TEST(Grow, NewcomersAreAppendedInTheOrderTheyCame) {
  run_with_newcomers(3, 2, join_a_group_of_five, [](Communicator& comm, std::vector<Newcomer>& n) {
    for (const Newcomer& newcomer : n) send_address(newcomer, comm.rendezvous_address());
    auto grown = comm.grow(2);
    EXPECT_EQ(grown->rank(), comm.rank());
    EXPECT_EQ(check_group(*grown, 5), 0);
    check_allreduce(*grown, 3, Coverage::sampled);
  });
}

int join_with_a_wrong_token(const std::string& address) {
  Options options = Options::from_env();
  options.timeout = std::chrono::seconds(5);
  try {
    Communicator::join(address, "not-this-job", options);
    return 16;
  } catch (const Error& e) {
    std::printf("stranger refused: %s\n", e.what());
    return 0;
  }
}

TEST(Grow, AStrangerWithoutTheTokenIsRefusedAndChangesNothing) {
  run_with_newcomers(2, 1, join_with_a_wrong_token,
                     [](Communicator& comm, std::vector<Newcomer>& n) {
                       for (const Newcomer& stranger : n) {
                         send_address(stranger, comm.rendezvous_address());
                         EXPECT_EQ(exit_code_of(stranger), 0);
                       }
                       n.clear();
                       comm.barrier();
                       auto grown = comm.grow();
                       EXPECT_EQ(check_group(*grown, 2), 0);
                     });
}

int replace_a_lost_rank(const std::string& address) {
  try {
    auto comm = Communicator::join(address, std::getenv("ARCOLL_JOB_TOKEN"), Options::from_env());
    return comm->rank() == 3 ? check_group(*comm, 4) : 14;
  } catch (const Error& e) {
    std::printf("replacement: %s\n", e.what());
    return 15;
  }
}

// Rank 2 of 4 dies; the survivors shrink, and a replacement joins them at their new address.
TEST(Grow, AReplacementJoinsTheSurvivorsOfALostRank) {
  run_with_newcomers(
      4, 1, replace_a_lost_rank,
      [](Communicator& comm, std::vector<Newcomer>& n) {
        if (comm.rank() == 2) ::raise(SIGKILL);
        EXPECT_THROW(comm.barrier(), Error);
        auto survivors = comm.shrink();
        for (const Newcomer& replacement : n)
          send_address(replacement, survivors->rendezvous_address());
        auto grown = survivors->grow(1);
        EXPECT_EQ(check_group(*grown, 4), 0);
      },
      2);
}

// Awaited newcomers that never come: every member fails within the timeout, saying so.
TEST(Grow, AwaitedNewcomersThatNeverComeFailEveryMemberInTime) {
  run_ranks(
      3,
      [](Communicator& comm) {
        const auto start = std::chrono::steady_clock::now();
        try {
          comm.grow(1);
          ADD_FAILURE() << "grow(1) returned with no newcomer";
        } catch (const TimeoutError& e) {
          EXPECT_NE(std::string(e.what()).find("0 of the 1 awaited newcomers"), std::string::npos)
              << e.what();
        }
        EXPECT_LT(seconds_since(start), 10.0);
      },
      {{"ARCOLL_TIMEOUT", "2"}});
}

}  // namespace
}  // namespace arcoll::testing
