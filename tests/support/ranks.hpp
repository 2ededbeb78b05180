// Runs a test body on real ranks: forked processes joined into one communicator over the
// real transports, exactly as arbench does. Failures inside a rank (gtest assertions or
// exceptions) fail the test in the parent, with that rank's output attached.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/local_launcher.hpp"

namespace arcoll::testing {

using RankBody = std::function<void(Communicator&)>;

// Every rank builds a communicator from the environment (plus `env`) and runs `body`.
void run_ranks(int ranks, const RankBody& body, const std::map<std::string, std::string>& env = {});

// Lower level: runs `body` in each started rank without building a communicator and returns
// the exits (with captured output) for the test to inspect. The body's return value is the
// rank's exit code; a gtest failure inside the rank turns a 0 into 1.
std::vector<RankExit> launch(const LocalLaunchOptions& options, const std::function<int()>& body);
// Ranks that each make a communicator from the environment, which every one must refuse with
// a ConfigurationError: a rank prints "refused: " and the error and exits 0, or exits 3 where
// the communicator was made.
std::vector<RankExit> launch_refused_joins(const LocalLaunchOptions& options);

// Memory a test hands the library: how to get `bytes` of it, and how to give it back.
struct TestBuffers {
  std::function<void*(std::size_t)> alloc;
  std::function<void(void*, std::size_t)> release;
};
// 2 ranks: rank 0 sends `bytes` from a buffer of `buffers` to rank 1, aborts saying `reason`,
// gives the buffer back, and only then lets rank 1 receive into a buffer of its own, staying
// alive until rank 1 is done (pipes order them, not sleeps). Rank 1 prints "error: <what>", or
// "the message arrived".
std::vector<RankExit> abort_then_free_before_the_read(std::size_t bytes, const std::string& reason,
                                                      const TestBuffers& buffers);

// The transport(s) `comm` should run over: ARCOLL_TRANSPORT when set (ctest runs the
// multi-process tests once per transport), else the registry's choice within a host and across
// hosts (ARCOLL_EMULATED_HOSTS splits this machine into several), joined by '+' when both.
std::string expected_transport(const Communicator& comm);
// The transport ARCOLL_TRANSPORT forces, when it names one: the suite's run for that transport
// (ctest runs the multi-process tests once per folder of transports/).
std::optional<std::string> forced_transport();
// ARCOLL_TRANSPORT when it is a choice the communicator takes: one transport, auto, or
// WITHIN+ACROSS (the runs between emulated hosts that name theirs: shm+ucx).
std::optional<std::string> chosen_transports();

// Open file descriptors and threads of this process: what a communicator must give back when
// it is destroyed, after a failure too.
int open_descriptors();
int thread_count();
// Whether this process is back to at most `descriptors` and `threads`, waiting up to a second
// for it: a joined thread stays listed in /proc/self/task until the kernel has reaped it, a
// moment after pthread_join returned.
bool back_to(int descriptors, int threads);

// Whether this process may run on one CPU only.
bool on_one_cpu();
// Confines this process to CPU 0, as a rank of a host with fewer cores than ranks: false where
// it may not.
bool confine_to_cpu0();

// Shared-memory segments of arcoll jobs in /dev/shm now (their names).
std::set<std::string> arcoll_segments();
// Segments present now but not `before` that stay for 2 s and were left by `ranks` (owned by one
// of them that has ended, or by none): a job's segments are unlinked once mapped, and those of
// other tests running alongside are theirs.
std::set<std::string> leaked_segments(const std::set<std::string>& before,
                                      const std::vector<RankExit>& ranks);

// Seconds since `start`.
double seconds_since(std::chrono::steady_clock::time_point start);
// The number printed after `label` in a rank's output, -1 when the label is missing.
double number_after(const std::string& output, const std::string& label);
// Whether a rank found at setup that it may not read a shm peer's memory (its own probe's
// warning): where the host denies cross-memory attach between sibling processes (Yama
// ptrace_scope, some containers), large messages go through the rings.
bool denied_cross_memory(const RankExit& e);
bool denied_cross_memory(const std::vector<RankExit>& exits);

// Gives the cost model a last-level cache of `bytes` whatever this machine's, so that what
// depends on where calls leave the caches (2-rank all-reduces in whole halves,
// src/core/calls.cpp) runs the same on any machine. Every rank calls it at the same point.
void assume_last_level_cache(Communicator& comm, std::size_t bytes);

// A barrier (#1), then all-reduces of one i64 with rank `late` coming late: 0.6 s to #2,
// within its 5 s deadline, and 1.5 s to #3, past its 0.4 s. Prints "after <s> s: <error>"
// and returns 0 when #3 fails; 4 when #2 is wrong; 3 when #3 passes, except on the late rank
// (the others may have left it everything it needed before giving up).
int allreduces_with_a_late_rank(Communicator& comm, int late);

// A short string of the exits, for assertion messages.
std::string describe(const std::vector<RankExit>& exits);

// After `victim` was killed (SIGKILL): every other rank exited cleanly on its own, printed
// "detected after", named "rank <victim>" and ended within `max_seconds`.
void expect_survivors_named(const std::vector<RankExit>& exits, int victim, double max_seconds);

}  // namespace arcoll::testing
