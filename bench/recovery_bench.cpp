// How long the survivors of a lost rank take to compute again: --np local ranks all-reduce
// --bytes in a loop; rank --kill is SIGKILLed at its --calls-th call; each survivor times,
// from the death, its failed call's end (detection), shrink()'s end (agreement and the new
// communicator) and the end of its first all-reduce on the new communicator. One row per
// trial (the slowest survivor's times), then the median of the trials.
//
// Usage: recovery_bench [--np 4] [--kill 2] [--trials 5] [--bytes 4M] [--calls 20]
// (ARCOLL_TRANSPORT, ARCOLL_EMULATED_HOSTS and the other settings apply to every rank.)
// Started as the ranks of a job by another launcher (scripts/cluster.sh: ARCOLL_RANK set), it
// runs one trial on them, the moments in a file of /dev/shm that the hosts share, and the
// survivors' rank 0 prints the row.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/local_launcher.hpp"
#include "arcoll/options.hpp"

namespace {

// Seconds on the clock every process of the machine shares.
double now() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Written by the ranks, read by the launcher: the death, and each rank's three moments.
struct Moments {
  std::atomic<double> death;
  struct Rank {
    std::atomic<double> detected, shrunk, computed;
  } ranks[4096];
};

int usage(const char* why) {
  std::fprintf(stderr,
               "recovery_bench: %s\nusage: recovery_bench [--np N] [--kill RANK] [--trials T] "
               "[--bytes SIZE] [--calls C]\n",
               why);
  return 2;
}

// One rank of a trial: all-reduces until `victim` dies at its `calls`-th, then shrinks and
// all-reduces once on the survivors. Returns the exit code, and the survivors' communicator.
int run_rank(Moments& moments, int victim, int calls, std::size_t bytes,
             std::unique_ptr<arcoll::Communicator>& survivors) {
  auto comm = arcoll::Communicator::from_env();
  const int rank = comm->rank();
  std::vector<float> data(std::max<std::size_t>(bytes / sizeof(float), 1), 1.0f);
  auto& mine = moments.ranks[rank];
  try {
    for (int i = 0;; ++i) {
      if (rank == victim && i == calls) {
        moments.death = now();
        ::raise(SIGKILL);
      }
      comm->allreduce(data.data(), data.size(), arcoll::DataType::f32, arcoll::ReduceOp::sum);
    }
  } catch (const arcoll::Error&) {
    mine.detected = now();
  }
  survivors = comm->shrink();
  mine.shrunk = now();
  survivors->allreduce(data.data(), data.size(), arcoll::DataType::f32, arcoll::ReduceOp::sum);
  mine.computed = now();
  return survivors->size() == comm->size() - 1 ? 0 : 3;
}

// The slowest survivor's three times since the death.
std::array<double, 3> slowest(const Moments& moments, const std::vector<int>& survivors) {
  std::array<double, 3> worst{};
  for (int r : survivors) {
    const auto& m = moments.ranks[r];
    worst[0] = std::max(worst[0], m.detected - moments.death);
    worst[1] = std::max(worst[1], m.shrunk - moments.death);
    worst[2] = std::max(worst[2], m.computed - moments.death);
  }
  return worst;
}

void print_row(const char* trial, const std::array<double, 3>& times, int survivors) {
  std::printf("%6s %12.4f %12.4f %12.4f %10d\n", trial, times[0], times[1], times[2], survivors);
}

// Under another launcher: this process is one rank of one trial.
int launched_rank(int victim, int calls, std::size_t bytes) {
  const char* port = std::getenv("ARCOLL_MASTER_PORT");
  const std::string path =
      std::string("/dev/shm/arcoll-recovery-") + (port != nullptr ? port : "0");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0 || ::ftruncate(fd, sizeof(Moments)) != 0)
    return usage(("cannot open " + path).c_str());
  auto* moments = static_cast<Moments*>(
      ::mmap(nullptr, sizeof(Moments), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ::close(fd);
  if (moments == MAP_FAILED) return usage("mmap failed");
  std::unique_ptr<arcoll::Communicator> survivors;
  const int status = run_rank(*moments, victim, calls, bytes, survivors);
  survivors->barrier();  // every survivor's moments are written
  if (survivors->rank() == 0) {
    std::vector<int> ranks;
    const int world = survivors->size() + 1;
    for (int r = 0; r < world; ++r)
      if (r != victim) ranks.push_back(r);
    std::printf("%6s %12s %12s %12s %10s\n", "trial", "detected_s", "shrunk_s", "computed_s",
                "survivors");
    print_row("1", slowest(*moments, ranks), survivors->size());
    ::unlink(path.c_str());
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  int np = 4, victim = -1, trials = 5, calls = 20;
  std::size_t bytes = 4u << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(("no value after " + flag).c_str());
    const char* value = argv[++i];
    char* end = nullptr;
    const long long number = std::strtoll(value, &end, 10);
    if (flag == "--bytes") {
      const auto parsed = arcoll::parse_byte_size(value);
      if (!parsed) return usage(("--bytes " + std::string(value) + " is not a size").c_str());
      bytes = *parsed;
      continue;
    }
    if (end == value || *end != '\0' || number < 0 || number > 4096)
      return usage((flag + " " + value + " is not a number from 0 to 4096").c_str());
    if (flag == "--np")
      np = static_cast<int>(number);
    else if (flag == "--kill")
      victim = static_cast<int>(number);
    else if (flag == "--trials")
      trials = static_cast<int>(number);
    else if (flag == "--calls")
      calls = static_cast<int>(number);
    else
      return usage(("unknown flag " + flag).c_str());
  }
  if (victim < 0) victim = np / 2;
  if (np < 2 || victim >= np || trials < 1)
    return usage("needs --np of 2 or more, --kill below it and --trials of 1 or more");

  if (std::getenv("ARCOLL_RANK") != nullptr) return launched_rank(victim, calls, bytes);
  auto* moments = static_cast<Moments*>(
      ::mmap(nullptr, sizeof(Moments), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (moments == MAP_FAILED) return usage("mmap failed");
  std::printf("# %d ranks, rank %d killed at its call %d of all-reduces of %zu bytes\n", np, victim,
              calls, bytes);
  std::printf("%6s %12s %12s %12s %10s\n", "trial", "detected_s", "shrunk_s", "computed_s",
              "survivors");
  std::vector<double> detected, shrunk, computed;
  for (int trial = 1; trial <= trials; ++trial) {
    new (moments) Moments{};
    arcoll::LocalLaunchOptions options;
    options.ranks = np;
    options.output = arcoll::RankOutput::capture;
    options.failure_grace = std::chrono::seconds(120);
    const auto exits = arcoll::run_local_ranks(options, [&] {
      std::unique_ptr<arcoll::Communicator> survivors;
      return run_rank(*moments, victim, calls, bytes, survivors);
    });
    std::vector<int> ranks;
    for (const auto& e : exits) {
      if (e.rank == victim) continue;
      if (!e.ok()) {
        std::fprintf(stderr, "trial %d: %s\n%s", trial, e.describe().c_str(), e.output.c_str());
        return 1;
      }
      ranks.push_back(e.rank);
    }
    const std::array<double, 3> worst = slowest(*moments, ranks);
    print_row(std::to_string(trial).c_str(), worst, static_cast<int>(ranks.size()));
    detected.push_back(worst[0]);
    shrunk.push_back(worst[1]);
    computed.push_back(worst[2]);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  print_row("median", {median(detected), median(shrunk), median(computed)}, np - 1);
  return 0;
}
