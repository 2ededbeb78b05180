#include "tests/support/ranks.hpp"

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "arcoll/error.hpp"
#include "arcoll/tuning.hpp"
#include "transports/shm/segment.hpp"
#include "transports/transport.hpp"

namespace arcoll::testing {
namespace {

// A run's variables (tests/CMakeLists.txt: ARCOLL_TEST_ENVIRONMENT="A=1 B=2"), set as the test
// program starts, before any rank is forked.
const bool kRunEnvironmentSet = [] {
  if (const char* run = std::getenv("ARCOLL_TEST_ENVIRONMENT")) {
    std::istringstream settings(run);
    for (std::string setting; settings >> setting;)
      if (const auto eq = setting.find('='); eq != std::string::npos)
        ::setenv(setting.substr(0, eq).c_str(), setting.substr(eq + 1).c_str(), 1);
  }
  return true;
}();

// Where the sanitizers' run-time is linked in: it prints a symbolized stack.
extern "C" void __sanitizer_print_stack_trace() __attribute__((weak));

// A rank that the launcher ends (still running past the grace after another rank failed: a hang)
// says where it was, in the output the test's report shows: the stack of the thread the signal
// reached, most often the main thread.
void say_where_when_terminated() {
  struct sigaction action {};
  action.sa_handler = [](int) {
    static const char kText[] = "ended by the launcher here:\n";
    (void)!::write(STDERR_FILENO, kText, sizeof kText - 1);
    if (__sanitizer_print_stack_trace != nullptr) {
      __sanitizer_print_stack_trace();
    } else {
      void* frames[64];
      ::backtrace_symbols_fd(frames, ::backtrace(frames, 64), STDERR_FILENO);
    }
    ::signal(SIGTERM, SIG_DFL);
    ::raise(SIGTERM);
  };
  ::sigaction(SIGTERM, &action, nullptr);
  void* frame;
  (void)::backtrace(&frame, 1);  // glibc loads its unwinder on first use: not in the handler
}

}  // namespace

std::vector<RankExit> abort_then_free_before_the_read(std::size_t bytes, const std::string& reason,
                                                      const TestBuffers& buffers) {
  int freed[2], done[2];
  if (::pipe(freed) != 0 || ::pipe(done) != 0) {
    ADD_FAILURE() << "pipe: " << std::strerror(errno);
    return {};
  }
  LocalLaunchOptions options;
  options.ranks = 2;
  auto exits = launch(options, [&] {
    auto comm = Communicator::from_env();
    void* buffer = buffers.alloc(bytes);
    if (buffer == nullptr) return 4;
    char byte = 0;
    if (comm->rank() == 0) {
      WorkPtr send = comm->isend(buffer, bytes, 1);
      comm->abort(reason);
      try {
        send->wait();
      } catch (const Error&) {
      }
      buffers.release(buffer, bytes);
      return ::write(freed[1], "x", 1) == 1 && ::read(done[0], &byte, 1) == 1 ? 0 : 5;
    }
    if (::read(freed[0], &byte, 1) != 1) return 5;
    try {
      comm->recv(buffer, bytes, 0);
      std::printf("the message arrived\n");
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
    }
    buffers.release(buffer, bytes);
    return ::write(done[1], "x", 1) == 1 ? 0 : 5;
  });
  for (int fd : {freed[0], freed[1], done[0], done[1]}) ::close(fd);
  return exits;
}

std::vector<RankExit> launch(const LocalLaunchOptions& options, const std::function<int()>& body) {
  LocalLaunchOptions o = options;
  o.output = RankOutput::capture;
  if (o.env.count("ARCOLL_TIMEOUT") == 0) o.env["ARCOLL_TIMEOUT"] = "30";
  // Communicator::from_env calibrates on first use: the suite's ranks take the built-in link
  // costs, which their expectations are written for, unless a test or run says otherwise.
  if (o.env.count("ARCOLL_CALIBRATE") == 0 && std::getenv("ARCOLL_CALIBRATE") == nullptr)
    o.env["ARCOLL_CALIBRATE"] = "off";
  // A rank fails for its own assertions, not for those the test had failed before it forked.
  const ::testing::TestResult* result =
      ::testing::UnitTest::GetInstance()->current_test_info()->result();
  const int parts_before = result->total_part_count();
  return run_local_ranks(o, [&] {
    say_where_when_terminated();
    int code = body();
    bool failed = false;
    for (int i = parts_before; i < result->total_part_count(); ++i)
      failed = failed || result->GetTestPartResult(i).failed();
    return code == 0 && failed ? 1 : code;
  });
}

std::optional<std::string> chosen_transports() {
  const char* chosen = std::getenv("ARCOLL_TRANSPORT");
  if (chosen == nullptr || !transport_choice_problem(chosen).empty()) return std::nullopt;
  return std::string(chosen);
}

std::optional<std::string> forced_transport() {
  std::optional<std::string> chosen = chosen_transports();
  if (!chosen || TransportRegistry::instance().find(*chosen) == nullptr) return std::nullopt;
  return chosen;
}

std::string expected_transport(const Communicator& comm) {
  const std::string choice = chosen_transports().value_or("auto");
  const std::string& within = transport_for(true, choice).name;
  const std::string& across = transport_for(false, choice).name;
  std::string name = comm.local_size() > 1 || comm.size() == 1 ? within : "";
  if (comm.node_count() > 1 && across != name) name += (name.empty() ? "" : "+") + across;
  return name;
}

namespace {
int directory_entries(const char* path) {
  int n = 0;
  if (DIR* dir = ::opendir(path)) {
    while (const dirent* entry = ::readdir(dir))
      if (entry->d_name[0] != '.') ++n;
    ::closedir(dir);
  }
  return n;
}
}  // namespace

int open_descriptors() {
  return directory_entries("/proc/self/fd") - 1;  // less the one reading the directory
}

int thread_count() {
  return directory_entries("/proc/self/task");
}

bool back_to(int descriptors, int threads) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (open_descriptors() > descriptors || thread_count() > threads) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool on_one_cpu() {
  cpu_set_t cpus;
  return ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) < 2;
}

bool confine_to_cpu0() {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  return ::sched_setaffinity(0, sizeof one, &one) == 0;
}

std::set<std::string> arcoll_segments() {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    if (entry.path().filename().string().rfind("arcoll-", 0) == 0)
      names.insert(entry.path().filename().string());
  return names;
}

namespace {
// Whether the segment's header names a process that still runs: a job of another test running
// alongside, never one of the ranks this test launched, which are reaped before it looks.
// Whether a segment may have been left by one of `ranks`: one of them owns it and has ended,
// or it has no owner yet. A segment of another test running meanwhile is that test's: live,
// or owned by a rank of its own that it killed, whose survivors remove it in their time.
bool left_by(const std::string& name, const std::vector<RankExit>& ranks) {
  shm::SegmentOwner owner;
  const int fd = ::open(("/dev/shm/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool read = ::pread(fd, &owner, sizeof owner, offsetof(shm::SegmentHeader, owner)) ==
                    static_cast<ssize_t>(sizeof owner);
  ::close(fd);
  if (!read || owner.pid <= 0) return true;
  return std::any_of(ranks.begin(), ranks.end(),
                     [&](const RankExit& e) { return e.pid == owner.pid; }) &&
         shm::has_ended(owner);
}
}  // namespace

std::set<std::string> leaked_segments(const std::set<std::string>& before,
                                      const std::vector<RankExit>& ranks) {
  std::set<std::string> left;
  for (int attempt = 0; attempt < 20; ++attempt) {
    left.clear();
    for (const auto& name : arcoll_segments())
      if (before.count(name) == 0 && left_by(name, ranks)) left.insert(name);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return left;
}

std::vector<RankExit> launch_refused_joins(const LocalLaunchOptions& options) {
  return launch(options, [] {
    try {
      auto comm = Communicator::from_env();
    } catch (const ConfigurationError& e) {
      std::printf("refused: %s\n", e.what());
      return 0;
    }
    return 3;
  });
}

std::string describe(const std::vector<RankExit>& exits) {
  std::string text;
  for (const auto& e : exits) {
    text += e.describe() + "\n";
    if (!e.output.empty())
      text += "---- output of rank " + std::to_string(e.rank) + " ----\n" + e.output;
  }
  return text;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double number_after(const std::string& output, const std::string& label) {
  const auto at = output.find(label);
  return at == std::string::npos ? -1 : std::atof(output.c_str() + at + label.size());
}

bool denied_cross_memory(const RankExit& e) {
  return e.output.find("cross-memory attach to rank") != std::string::npos;
}

bool denied_cross_memory(const std::vector<RankExit>& exits) {
  return std::any_of(exits.begin(), exits.end(),
                     [](const RankExit& e) { return denied_cross_memory(e); });
}

void assume_last_level_cache(Communicator& comm, std::size_t bytes) {
  Tuning tuning;
  tuning.last_level_cache_bytes = static_cast<double>(bytes);
  comm.set_tuning(tuning);
}

int allreduces_with_a_late_rank(Communicator& comm, int late) {
  comm.barrier();  // #1
  std::int64_t value = comm.rank() + 1;
  comm.set_timeout(std::chrono::seconds(5));
  if (comm.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(600));
  comm.allreduce(&value, 1, DataType::i64, ReduceOp::sum);  // #2: late, within 5 s
  if (value != static_cast<std::int64_t>(comm.size()) * (comm.size() + 1) / 2) return 4;
  comm.set_timeout(std::chrono::milliseconds(400));
  if (comm.rank() == late) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const auto start = std::chrono::steady_clock::now();
  try {
    comm.allreduce(&value, 1, DataType::i64, ReduceOp::sum);  // #3: too late
  } catch (const Error& e) {
    std::printf("after %.3f s: %s\n", seconds_since(start), e.what());
    return 0;
  }
  return comm.rank() == late ? 0 : 3;
}

void expect_survivors_named(const std::vector<RankExit>& exits, int victim, double max_seconds) {
  ASSERT_GT(exits.size(), static_cast<std::size_t>(victim));
  EXPECT_EQ(exits[static_cast<std::size_t>(victim)].signal, SIGKILL) << describe(exits);
  const std::string name = "rank " + std::to_string(victim);
  for (const auto& e : exits) {
    if (e.rank == victim) continue;
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_FALSE(e.killed_by_launcher) << describe(exits);
    EXPECT_NE(e.output.find("detected after"), std::string::npos) << describe(exits);
    EXPECT_NE(e.output.find(name), std::string::npos)
        << "rank " << e.rank << " did not name " << name << ":\n"
        << e.output;
    EXPECT_LT(e.seconds, max_seconds) << describe(exits);
  }
}

void run_ranks(int ranks, const RankBody& body, const std::map<std::string, std::string>& env) {
  LocalLaunchOptions options;
  options.ranks = ranks;
  options.env = env;
  options.failure_grace = std::chrono::seconds(40);
  auto exits = launch(options, [&] {
    auto comm = Communicator::from_env();
    body(*comm);
    return 0;
  });
  ASSERT_EQ(exits.size(), static_cast<std::size_t>(ranks));
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << e.describe() << "\n" << e.output;
}

}  // namespace arcoll::testing
