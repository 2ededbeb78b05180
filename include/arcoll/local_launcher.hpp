// Starts N ranks of a job on this host by forking, the way `arbench --np N` and the
// multi-process tests do: no MPI needed. Rank 0 hosts the rendezvous store on a listening
// socket the launcher opened, so there is no race for a port.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace arcoll {

enum class RankOutput {
  forward,  // rank 0 writes straight to our stdout/stderr; other ranks' lines get "[rank r] "
  capture,  // every rank's stdout and stderr are collected into RankExit::output
};

struct LocalLaunchOptions {
  int ranks = 2;
  // Ranks actually started; the others are announced in the world size but never run
  // (to test what a job does when a rank never comes). -1: all of them.
  int started_ranks = -1;
  RankOutput output = RankOutput::forward;
  // Extra environment for every rank (e.g. ARCOLL_TIMEOUT).
  std::map<std::string, std::string> env;
  // Once a rank has failed, how long the others get to notice and exit on their own. Then
  // the launcher terminates those still running, as mpirun does: SIGTERM (and SIGCONT, for a
  // stopped rank), then SIGKILL `kill_grace` later; their exits say so.
  std::chrono::milliseconds failure_grace{90'000};
  std::chrono::milliseconds kill_grace{2'000};
};

struct RankExit {
  int rank = 0;
  int pid = 0;        // the rank's process
  int exit_code = 0;  // meaningful when signal == 0
  int signal = 0;     // signal that ended the rank, 0 if it exited
  bool killed_by_launcher = false;  // still running failure_grace after another rank failed
  double seconds = 0;  // from launch to exit
  std::string output;  // RankOutput::capture only
  bool ok() const { return signal == 0 && exit_code == 0; }
  std::string describe() const;  // "rank 2 exited with code 1", "rank 3 killed by signal 9"
};

// Runs `body` in every started rank (a forked child with ARCOLL_RANK, ARCOLL_WORLD_SIZE,
// ARCOLL_MASTER_ADDR/PORT set); its return value is the rank's exit code, an escaping
// exception is printed and gives exit code 1. Returns one entry per started rank.
std::vector<RankExit> run_local_ranks(const LocalLaunchOptions& options,
                                      const std::function<int()>& body);

}  // namespace arcoll
