// What arbench's commands share on the command line: usage errors (exit code 2), flag
// parsing with messages that name the flag, and the ranks a tool runs on.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/local_launcher.hpp"

namespace CLI {
class App;
}

namespace arbench {

inline constexpr int kUsageError = 2;

// A bad flag, value or environment: reported as "arbench: <message>" with exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::string quoted(const std::string& text);
// Bytes, or a number with a K, M, G or T suffix.
std::size_t parse_size(const char* flag, const std::string& text);
long long parse_integer(const char* flag, const std::string& text, long long min, long long max);
std::vector<std::string> split_list(const std::string& text);

// The first executable `name` in PATH.
std::optional<std::string> find_on_path(const std::string& name);

// mpirun's flags when the user gave none (`given` empty): Open MPI crosses shared memory between
// ranks of a host unless told otherwise, so beside arcoll over TCP it is put on TCP too, and
// both measure the same path.
std::string mpirun_args_or_default(const std::string& given, const std::string& transport);

// MPI's ranks must be started by mpirun: runs this same command line (this executable, argv's
// arguments) under `mpirun --allow-run-as-root --oversubscribe -np N <mpirun_args> ...`.
// Returns only on failure, with the exit code to end with.
int reexec_under_mpirun(const std::string& mpirun_args, int ranks, int argc,
                        const char* const* argv);

// Writes to stdout at once (ranks' output interleaves otherwise).
void print(const std::string& text);

// 2 when every failed rank rejected a setting, 1 for any other failure.
int exit_status(const std::vector<arcoll::RankExit>& exits);

// How arbench forks `ranks` ranks here: output forwarded, and once a rank has failed the others
// get ARCOLL_LAUNCH_GRACE seconds (default 10) to exit before the launcher terminates them.
// UsageError for a bad value.
arcoll::LocalLaunchOptions local_launch(int ranks);

// What the tools beside the sweep share: ranks forked here (--np, at least `min_ranks`,
// `default_ranks` when not given) or started by a launcher, one communicator each, and `body`
// run on it. `check_flags` runs first, once: an error it returns exits 2. Returns the exit
// code.
struct ToolFlags {
  std::string np;
  std::string transport;
};
void add_tool_flags(CLI::App* tool, ToolFlags& flags);
int run_tool(const char* name, const ToolFlags& flags, int min_ranks, int default_ranks,
             const std::function<std::optional<std::string>()>& check_flags,
             const std::function<int(arcoll::Communicator&)>& body);

}  // namespace arbench
