#include "arbench/cli.hpp"

#include <limits.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "arcoll/error.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/options.hpp"

namespace arbench {

std::string quoted(const std::string& text) {
  return "'" + text + "'";
}

std::size_t parse_size(const char* flag, const std::string& text) {
  auto bytes = arcoll::parse_byte_size(text);
  if (!bytes)
    throw UsageError(std::string(flag) + ": invalid size " + quoted(text) +
                     " (bytes, or a number with a K, M, G or T suffix such as 64K)");
  return *bytes;
}

long long parse_integer(const char* flag, const std::string& text, long long min, long long max) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw UsageError(std::string(flag) + ": " + quoted(text) + " is not an integer");
  if (value < min || value > max)
    throw UsageError(std::string(flag) + ": " + quoted(text) + " is outside " +
                     std::to_string(min) + ".." + std::to_string(max));
  return value;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

void print(const std::string& text) {
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

int exit_status(const std::vector<arcoll::RankExit>& exits) {
  bool failed = false;
  bool only_usage_errors = true;
  for (const arcoll::RankExit& exit : exits)
    if (!exit.ok()) {
      std::fprintf(stderr, "arbench: %s\n", exit.describe().c_str());
      failed = true;
      only_usage_errors = only_usage_errors && exit.signal == 0 && exit.exit_code == kUsageError;
    }
  return !failed ? 0 : only_usage_errors ? kUsageError : 1;
}

arcoll::LocalLaunchOptions local_launch(int ranks) {
  arcoll::LocalLaunchOptions launch;
  launch.ranks = ranks;
  launch.output = arcoll::RankOutput::forward;
  long long grace = 10;
  if (const char* text = std::getenv("ARCOLL_LAUNCH_GRACE"); text != nullptr && *text != '\0')
    grace = parse_integer("ARCOLL_LAUNCH_GRACE", text, 0, 24 * 3600);
  launch.failure_grace = std::chrono::seconds(grace);
  return launch;
}

void add_tool_flags(CLI::App* tool, ToolFlags& flags) {
  tool->add_option("--np", flags.np, "Ranks to fork on this host")->type_name("N");
  tool->add_option("--transport", flags.transport, "Transport (default: auto)")->type_name("NAME");
}

int run_tool(const char* name, const ToolFlags& flags, int min_ranks, int default_ranks,
             const std::function<std::optional<std::string>()>& check_flags,
             const std::function<int(arcoll::Communicator&)>& body) {
  arcoll::Options options;
  std::optional<int> np;
  arcoll::LaunchInfo here;
  try {
    try {
      options = arcoll::Options::from_env();
      here = arcoll::detect_launch();
    } catch (const arcoll::Error& e) {
      throw UsageError(e.what());
    }
    if (!flags.transport.empty()) options.transport = flags.transport;
    if (std::string why = arcoll::Communicator::transport_choice_problem(options.transport);
        !why.empty())
      throw UsageError((flags.transport.empty() ? "ARCOLL_TRANSPORT: " : "--transport: ") + why);
    if (!flags.np.empty()) np = static_cast<int>(parse_integer("--np", flags.np, min_ranks, 4096));
    if (auto error = check_flags()) throw UsageError(*error);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench %s: %s\n", name, e.what());
    return kUsageError;
  }
  auto rank = [&]() -> int {
    try {
      arcoll::Communicator comm(here.source != "default" ? here : arcoll::detect_launch(), options);
      return body(comm);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "arbench %s: %s\n", name, e.what());
      return 1;
    }
  };
  if (here.source != "default") return rank();
  try {
    return exit_status(arcoll::run_local_ranks(local_launch(np.value_or(default_ranks)), rank));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "arbench: %s\n", e.what());
    return 1;
  }
}

std::optional<std::string> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  std::string all = path;
  std::size_t start = 0;
  while (start <= all.size()) {
    std::size_t colon = all.find(':', start);
    if (colon == std::string::npos) colon = all.size();
    std::string dir = all.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  return std::nullopt;
}

// Splits --mpirun-args on blanks (no quoting: MPI's flags do not need it).
std::vector<std::string> split_blanks(const std::string& text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    std::size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    if (j > i) words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

std::string mpirun_args_or_default(const std::string& given, const std::string& transports) {
  if (!given.empty()) return given;
  // Open MPI over UCX beside arcoll over UCX (within hosts, across them or both: "shm+ucx");
  // over arcoll's tcp, its own sockets alone.
  for (const std::string& choice : split_list(transports)) {
    const std::size_t plus = choice.find('+');
    if (choice.substr(0, plus) == "ucx" ||
        (plus != std::string::npos && choice.substr(plus + 1) == "ucx"))
      return "--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any";
  }
  return transports == "tcp" ? "--mca pml ob1 --mca btl self,tcp"
                             : "--mca pml ob1 --mca btl self,vader,tcp";
}

int reexec_under_mpirun(const std::string& mpirun_args, int ranks, int argc,
                        const char* const* argv) {
  const auto mpirun = find_on_path("mpirun");
  if (!mpirun) {
    std::fprintf(stderr,
                 "arbench: the mpi backend needs its ranks started by mpirun, and no mpirun is "
                 "on PATH (install openmpi-bin, or start arbench under your MPI's launcher)\n");
    return kUsageError;
  }
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::vector<std::string> args = {*mpirun, "--allow-run-as-root", "--oversubscribe", "-np",
                                   std::to_string(ranks)};
  for (std::string& word : split_blanks(mpirun_args)) args.push_back(std::move(word));
  args.push_back(n > 0 ? std::string(self, static_cast<std::size_t>(n)) : std::string(argv[0]));
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  std::fflush(stdout);
  ::execv(mpirun->c_str(), c_args.data());
  std::fprintf(stderr, "arbench: cannot run %s: %s\n", mpirun->c_str(), std::strerror(errno));
  return 1;
}

}  // namespace arbench
