// What the ranks of a job must agree on, tried as a careful user breaks it: the root of a
// rooted call, the wire format (the world size: test_failures.cpp's Settings), whether a call happened when one rank gave
// up on it, and who rank r is. Every rank gets the right result or a clear error naming both
// sides, within moments (the timeout is long, and no rank may wait it out); a correct program
// never fails on timing (a rank that leaves at once).
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "arcoll/error.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

// Long enough that a rank that waits for it fails the seconds assertions.
constexpr const char* kLongTimeout = "60";
constexpr double kWellWithinTimeout = 20.0;

LocalLaunchOptions ranks_of(int ranks, std::map<std::string, std::string> env = {}) {
  LocalLaunchOptions options;
  options.ranks = ranks;
  options.env = std::move(env);
  options.env.emplace("ARCOLL_TIMEOUT", kLongTimeout);
  options.failure_grace = std::chrono::seconds(50);
  return options;
}

// Runs `call` on every rank: a rank prints its error and exits 0, or exits 3 when the call
// returned.
std::vector<RankExit> each_fails(const LocalLaunchOptions& options,
                                 const std::function<void(Communicator&)>& call) {
  return launch(options, [&] {
    try {
      auto comm = Communicator::from_env();
      call(*comm);
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      return 0;
    }
    std::printf("the call returned\n");
    return 3;
  });
}

// Every rank failed the call itself (not a later one), within moments, saying all of `said`.
void expect_every_rank_said(const std::vector<RankExit>& exits,
                            const std::vector<std::string>& said) {
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_LT(e.seconds, kWellWithinTimeout) << describe(exits);
    for (const std::string& text : said)
      EXPECT_NE(e.output.find(text), std::string::npos) << "'" << text << "' in\n" << e.output;
  }
}

// Each rank names a root of its own (2 ranks: itself; 3: rank 0 itself, the others rank 1).
// A rank that names itself receives nothing in broadcast and scatter; the roots of a gather
// wait for one another: without the check, silent wrong results or a wait for the timeout.
TEST(Agreement, RootsThatDisagreeFailTheCallOnEveryRankNamingBoth) {
  using Rooted = std::function<void(Communicator&, float*, std::size_t, int)>;
  const std::vector<std::pair<std::string, Rooted>> calls = {
      {"broadcast", [](Communicator& c, float* b, std::size_t n,
                       int root) { c.broadcast(b, n, DataType::f32, root); }},
      {"scatter", [](Communicator& c, float* b, std::size_t n,
                     int root) { c.scatter(b, b + c.size() * n, n, DataType::f32, root); }},
      {"gather", [](Communicator& c, float* b, std::size_t n,
                    int root) { c.gather(b + c.size() * n, b, n, DataType::f32, root); }},
      {"reduce", [](Communicator& c, float* b, std::size_t n, int root) {
         c.reduce(b + c.size() * n, b, n, DataType::f32, ReduceOp::sum, root);
       }}};
  for (const auto& [name, call] : calls)
    for (std::size_t count : {std::size_t{1000}, std::size_t{1} << 20})
      for (int world : {2, 3}) {
        SCOPED_TRACE(name + " of " + std::to_string(count) + " on " + std::to_string(world));
        auto exits = each_fails(ranks_of(world), [&](Communicator& comm) {
          std::vector<float> buffer((comm.size() + 1) * count, 1.0f);
          const int root = world == 2 ? comm.rank() : std::min(comm.rank(), 1);
          call(comm, buffer.data(), count, root);
        });
        expect_every_rank_said(exits, {name + " #1", "root 0", "root 1"});
      }
}

// A correct program whose ranks leave as soon as their calls return: the first rank to leave
// must not take the rendezvous, or its messages, from a rank still joining or receiving; and
// the 20 runs leave nothing in /dev/shm.
TEST(Agreement, RanksThatLeaveRightAfterTheirCallsLoseNothing) {
  const auto before = arcoll_segments();
  std::vector<RankExit> every_run;
  for (int run = 0; run < 20; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    auto exits = launch(ranks_of(2), [] {
      auto comm = Communicator::from_env();
      std::vector<float> data(1000, static_cast<float>(comm->rank() + 1));
      comm->broadcast(data.data(), data.size(), DataType::f32, 0);
      for (float x : data)
        if (x != 1.0f) return 4;
      int token = comm->rank() == 0 ? 42 : 0;
      if (comm->rank() == 0) comm->send(&token, sizeof token, 1);
      if (comm->rank() == 1) comm->recv(&token, sizeof token, 0);
      return token == 42 ? 0 : 5;
    });
    for (const auto& e : exits) ASSERT_TRUE(e.ok()) << describe(exits);
    every_run.insert(every_run.end(), exits.begin(), exits.end());
  }
  EXPECT_TRUE(leaked_segments(before, every_run).empty());
}

// Rank 0 gives up on a call that rank 1 has not entered yet, and rank 1 enters it only once
// rank 0 has aborted (ordered through a pipe, not by sleeping): rank 0's data is already on
// its way to rank 1, but rank 1 must fail the call too, naming rank 0's reason, not return a
// result built from it. The reason is longer than a transport sends inline (UCX's shared
// memory: 100 B with the headers), whose first such message UCX once kept in a sender that
// moved its worker no more.
TEST(Agreement, ACallThatOneRankAbortedFailsOnEveryRank) {
  for (std::size_t count : {std::size_t{8}, std::size_t{1} << 20})
    for (int world : {2, 3}) {
      SCOPED_TRACE(std::to_string(count) + " floats on " + std::to_string(world) + " ranks");
      int aborted[2];
      ASSERT_EQ(::pipe(aborted), 0);
      auto exits = launch(ranks_of(world), [&] {
        auto comm = Communicator::from_env();
        std::vector<float> data(count, 1.0f);
        try {
          if (comm->rank() == 0) {
            auto work = comm->iallreduce(data.data(), data.data(), count, DataType::f32,
                                         ReduceOp::sum);
            if (work->wait_for(std::chrono::milliseconds(50))) return 4;  // nobody else came
            comm->abort("rank 0 gave up, having waited for the others longer than this test "
                        "allows any rank to wait for its peers");
            for (int r = 1; r < world; ++r) (void)!::write(aborted[1], "x", 1);
            work->wait();
          } else {
            char byte;
            if (::read(aborted[0], &byte, 1) != 1) return 5;
            comm->allreduce(data.data(), count, DataType::f32, ReduceOp::sum);
          }
        } catch (const Error& e) {
          std::printf("error: %s\n", e.what());
          return 0;
        }
        std::printf("the call returned %g\n", static_cast<double>(data[0]));
        return 3;
      });
      ::close(aborted[0]);
      ::close(aborted[1]);
      expect_every_rank_said(exits, {"rank 0 gave up"});
    }
}

// set_wire on one rank only: the wire enters the call's signature, so the call fails on every
// rank naming both formats (else 2 against 2.001 at 1,000 elements, and a misleading size
// mismatch at 1M).
TEST(Agreement, WireFormatsThatDisagreeFailTheCallNamingBoth) {
  for (std::size_t count : {std::size_t{1000}, std::size_t{1} << 20})
    for (int world : {2, 3}) {
      SCOPED_TRACE(std::to_string(count) + " floats on " + std::to_string(world) + " ranks");
      auto exits = each_fails(ranks_of(world), [&](Communicator& comm) {
        if (comm.rank() == 1) comm.set_wire(DataType::bf16);
        std::vector<float> data(count, 1.0f);
        comm.allreduce(data.data(), count, DataType::f32, ReduceOp::sum);
      });
      expect_every_rank_said(exits, {"allreduce #1", "wire bf16"});
    }
}

// Two processes that claim the same rank (two jobs started on one master port): the job
// refuses the second and tells it why; the job then either runs right or fails clearly on
// every rank, never with a stranger mixed in unseen.
TEST(Agreement, ASecondProcessClaimingARankIsRefusedSayingWhy) {
  for (const bool other_token : {false, true}) {
    SCOPED_TRACE(other_token ? "with another job token" : "with the same job token");
    // Rank 0 keeps its store until both claimants of rank 1 are done: a process that finds
    // no store at all waits for one until the timeout, as a slow joiner must be let to.
    int done[2];
    ASSERT_EQ(::pipe(done), 0);
    auto exits = launch(ranks_of(3), [&] {
      const bool first = std::string(std::getenv("ARCOLL_RANK")) == "0";
      if (std::string(std::getenv("ARCOLL_RANK")) == "2") {
        ::setenv("ARCOLL_RANK", "1", 1);
        if (other_token) ::setenv("ARCOLL_JOB_TOKEN", "another job's token", 1);
      }
      ::setenv("ARCOLL_WORLD_SIZE", "2", 1);
      int status = 0;
      std::unique_ptr<Communicator> comm;
      try {
        comm = Communicator::from_env();
        auto data = make_input(DataType::f32, ReduceOp::sum, comm->rank(), 1001);
        comm->allreduce(data.data(), 1001, DataType::f32, ReduceOp::sum);
        if (count_wrong(data.data(), DataType::f32, ReduceOp::sum, 2, 1001) != 0) status = 4;
        std::printf("right result\n");
      } catch (const Error& e) {
        std::printf("error: %s\n", e.what());
      }
      if (!first) {
        (void)!::write(done[1], "x", 1);
        return status;
      }
      char bytes[2];
      pollfd readable{done[0], POLLIN, 0};
      for (int got = 0; got < 2 && ::poll(&readable, 1, 30'000) == 1;)
        got += static_cast<int>(std::max<ssize_t>(::read(done[0], bytes, 2 - got), 0));
      return status;
    });
    ::close(done[0]);
    ::close(done[1]);
    ASSERT_EQ(exits.size(), 3u);
    int refused = 0, right = 0;
    for (const auto& e : exits) {
      EXPECT_TRUE(e.ok()) << describe(exits);
      EXPECT_LT(e.seconds, kWellWithinTimeout) << describe(exits);
      right += e.output.find("right result") != std::string::npos;
      refused += e.output.find(other_token ? "job token" : "already joined as rank 1") !=
                 std::string::npos;
      EXPECT_EQ(e.output.find("exited or crashed"), std::string::npos) << describe(exits);
    }
    EXPECT_GE(refused, 1) << describe(exits);
    // A job of rank 0 and one of the two: both right, or both told why they failed.
    EXPECT_TRUE(right == 2 || right == 0) << describe(exits);
    if (other_token) {
      EXPECT_EQ(right, 2) << describe(exits);
    }
  }
}

}  // namespace
}  // namespace arcoll::testing
