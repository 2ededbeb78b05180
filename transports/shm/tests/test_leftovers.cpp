// What a job leaves in /dev/shm: nothing, however it ends. A rank that dies while joining
// (killed, or ended as an uncaught exception ends it, with no destructor run) leaves its
// segment to the survivors of its host, which remove it when their setup fails, or to the next
// job's start; a failed call leaves nothing; segments of owners that ended are removed at the
// next start, those of live owners (or of another pid namespace) never.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "arcoll/error.hpp"
#include "tests/support/ranks.hpp"
#include "transports/shm/segment.hpp"

namespace arcoll::testing {
namespace {

using shm::SegmentHeader;
using shm::SegmentOwner;

// Every run where ranks of one host meet over shared memory: shm, and the mixed runs' hosts of
// two ranks (4 ranks here).
class Leftovers : public ::testing::Test {
 protected:
  void SetUp() override {
    if (forced_transport().value_or("shm") != "shm")
      GTEST_SKIP() << "no shm transport on the " << *forced_transport() << " run";
  }
};

// A segment file named as a job's, whose header names `owner`, modified `age` ago.
std::string leave_segment(const SegmentOwner& owner, std::chrono::seconds age = {}) {
  std::mt19937_64 rng(std::random_device{}());
  char name[64];
  std::snprintf(name, sizeof name, "arcoll-%016llx-1", static_cast<unsigned long long>(rng()));
  const std::string path = std::string("/dev/shm/") + name;
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
  EXPECT_GE(fd, 0) << path;
  SegmentHeader header{};
  header.owner = owner;
  EXPECT_EQ(::write(fd, &header, sizeof header), static_cast<ssize_t>(sizeof header));
  const timespec when[2] = {{::time(nullptr) - age.count(), 0}, {::time(nullptr) - age.count(), 0}};
  ::futimens(fd, when);
  ::close(fd);
  return name;
}

// The owner a process had that has ended and been reaped.
SegmentOwner an_ended_process() {
  int report[2];
  EXPECT_EQ(::pipe(report), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const SegmentOwner owner = shm::this_process();
    (void)!::write(report[1], &owner, sizeof owner);
    ::_exit(0);
  }
  SegmentOwner owner;
  EXPECT_EQ(::read(report[0], &owner, sizeof owner), static_cast<ssize_t>(sizeof owner));
  ::waitpid(child, nullptr, 0);
  ::close(report[0]);
  ::close(report[1]);
  return owner;
}

bool present(const std::string& name) {
  return std::filesystem::exists("/dev/shm/" + name);
}

TEST_F(Leftovers, ThoseOfOwnersThatEndedGoAtTheNextStartAndNoOthers) {
  const SegmentOwner ended = an_ended_process();
  SegmentOwner elsewhere = ended;  // the same pid in another pid namespace: cannot be judged
  elsewhere.pid_namespace ^= 0x5a5a;
  SegmentOwner reused = shm::this_process();  // a live pid that another process had before
  reused.start += 1;
  const std::string of_ended = leave_segment(ended), of_reused = leave_segment(reused),
                    of_live = leave_segment(shm::this_process()),
                    of_elsewhere = leave_segment(elsewhere),
                    unowned_new = leave_segment({}),
                    unowned_old = leave_segment({}, std::chrono::hours(1));
  run_ranks(4, [](Communicator& comm) { comm.barrier(); });
  EXPECT_FALSE(present(of_ended));
  EXPECT_FALSE(present(of_reused));
  EXPECT_FALSE(present(unowned_old));
  EXPECT_TRUE(present(of_live));
  EXPECT_TRUE(present(of_elsewhere));
  EXPECT_TRUE(present(unowned_new));
  for (const std::string& name : {of_live, of_elsewhere, unowned_new})
    std::filesystem::remove("/dev/shm/" + name);
}

// How rank 1 ends while joining, once its segment holds its owner: killed, or aborted as an
// exception nobody catches ends a process (std::terminate: no destructor runs).
class DyingWhileJoining : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (forced_transport().value_or("shm") != "shm")
      GTEST_SKIP() << "no shm transport on the " << *forced_transport() << " run";
  }
};

TEST_P(DyingWhileJoining, LeavesNothingInDevShm) {
  const int signal = GetParam();
  const auto before = arcoll_segments();
  LocalLaunchOptions options;
  options.ranks = 4;
  options.env = {{"ARCOLL_TIMEOUT", "3"}};
  options.failure_grace = std::chrono::seconds(20);
  auto exits = launch(options, [&] {
    std::atomic<bool> joined{false};
    std::thread watcher;
    if (std::getenv("ARCOLL_RANK") == std::string("1"))
      watcher = std::thread([&] {
        while (!joined) {
          for (const std::string& name : arcoll_segments()) {
            if (before.count(name) != 0 || !name.ends_with("-1")) continue;
            SegmentOwner owner;
            const int fd = ::open(("/dev/shm/" + name).c_str(), O_RDONLY);
            const bool read = fd >= 0 && ::pread(fd, &owner, sizeof owner,
                                                 offsetof(SegmentHeader, owner)) == sizeof owner;
            if (fd >= 0) ::close(fd);
            if (read && owner.pid == ::getpid()) ::raise(signal);
          }
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      });
    int status = 3;
    try {
      auto comm = Communicator::from_env();
      comm->barrier();
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      status = 0;
    }
    joined = true;
    if (watcher.joinable()) watcher.join();
    return status;
  });
  // Rank 1 may have died after every rank had mapped its segment (nothing to leave then), or
  // before: the survivors' failed setup, or the next job's start, removes it.
  for (const auto& name : leaked_segments(before, exits))
    ADD_FAILURE() << "left in /dev/shm after the job: " << name << "\n" << describe(exits);
  run_ranks(2, [](Communicator& comm) { comm.barrier(); });
  EXPECT_TRUE(leaked_segments(before, exits).empty()) << describe(exits);
}

INSTANTIATE_TEST_SUITE_P(Ways, DyingWhileJoining, ::testing::Values(SIGKILL, SIGABRT),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == SIGKILL ? std::string("killed")
                                                        : std::string("aborted");
                         });

// A call that fails (a mismatch) leaves nothing: the segments' names went once all had mapped.
TEST_F(Leftovers, AFailedCallLeavesNothing) {
  const auto before = arcoll_segments();
  LocalLaunchOptions options;
  options.ranks = 4;
  auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    std::vector<float> data(100, 1.0f);
    try {
      comm->allreduce(data.data(), comm->rank() == 2 ? 99 : 100, DataType::f32, ReduceOp::sum);
    } catch (const Error&) {
      return 0;
    }
    return 3;
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
  EXPECT_TRUE(leaked_segments(before, exits).empty());
}

}  // namespace
}  // namespace arcoll::testing
