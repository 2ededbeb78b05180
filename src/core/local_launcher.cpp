#include "arcoll/local_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

#include "arcoll/error.hpp"
#include "src/base/auth.hpp"
#include "src/base/socket.hpp"

namespace arcoll {
namespace {

using Clock = std::chrono::steady_clock;

// Variables of other launchers that would make a child believe it belongs to their job.
constexpr const char* kForeignLaunchVariables[] = {"OMPI_COMM_WORLD_RANK",
                                                   "OMPI_COMM_WORLD_SIZE",
                                                   "SLURM_PROCID",
                                                   "SLURM_NTASKS",
                                                   "PMI_RANK",
                                                   "PMI_SIZE",
                                                   "PMIX_RANK",
                                                   "RANK",
                                                   "WORLD_SIZE",
                                                   "LOCAL_RANK",
                                                   "LOCAL_WORLD_SIZE",
                                                   "MASTER_ADDR",
                                                   "MASTER_PORT"};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int output_fd = -1;   // read end of the rank's stdout+stderr, -1 when inherited
  std::string pending;  // partial line (forward mode)
  RankExit exit;
  bool running = true;
};

[[noreturn]] void run_child(int rank, const LocalLaunchOptions& options, int port,
                            const std::string& token, int listen_fd, int output_fd,
                            const std::function<int()>& body) {
  for (const char* name : kForeignLaunchVariables) ::unsetenv(name);
  ::setenv("ARCOLL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("ARCOLL_WORLD_SIZE", std::to_string(options.ranks).c_str(), 1);
  ::setenv("ARCOLL_LOCAL_RANK", std::to_string(rank).c_str(), 1);
  ::setenv("ARCOLL_LOCAL_SIZE", std::to_string(options.ranks).c_str(), 1);
  ::setenv("ARCOLL_MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("ARCOLL_MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("ARCOLL_JOB_TOKEN", token.c_str(), 1);
  for (const auto& [name, value] : options.env) ::setenv(name.c_str(), value.c_str(), 1);
  if (rank == 0) {
    ::fcntl(listen_fd, F_SETFD, 0);
    ::setenv("ARCOLL_STORE_LISTEN_FD", std::to_string(listen_fd).c_str(), 1);
  } else {
    ::close(listen_fd);
    ::unsetenv("ARCOLL_STORE_LISTEN_FD");
  }
  if (output_fd >= 0) {
    ::dup2(output_fd, STDOUT_FILENO);
    ::dup2(output_fd, STDERR_FILENO);
    ::close(output_fd);
  }
  int code = 1;
  try {
    code = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "rank %d: unknown error\n", rank);
  }
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(code);
}

void forward_lines(Child& child, const char* data, std::size_t n) {
  child.pending.append(data, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = child.pending.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    std::string line =
        "[rank " + std::to_string(child.rank) + "] " + child.pending.substr(start, nl - start + 1);
    [[maybe_unused]] auto w = ::write(STDERR_FILENO, line.data(), line.size());
  }
  child.pending.erase(0, start);
}

// Reads whatever the children wrote; returns when `timeout_ms` passes or output arrived.
void pump_output(std::vector<Child>& children, RankOutput mode, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<Child*> owners;
  for (auto& c : children)
    if (c.output_fd >= 0) {
      fds.push_back({c.output_fd, POLLIN, 0});
      owners.push_back(&c);
    }
  if (fds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return;
  }
  if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Child& c = *owners[i];
    char buffer[16384];
    ssize_t n = ::read(c.output_fd, buffer, sizeof buffer);
    if (n > 0) {
      if (mode == RankOutput::capture)
        c.exit.output.append(buffer, static_cast<std::size_t>(n));
      else
        forward_lines(c, buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      if (mode == RankOutput::forward && !c.pending.empty()) forward_lines(c, "\n", 1);
      ::close(c.output_fd);
      c.output_fd = -1;
    }
  }
}

}  // namespace

std::string RankExit::describe() const {
  std::string text = "rank " + std::to_string(rank);
  if (killed_by_launcher)
    return text + " was still running after another rank had failed: the launcher terminated it";
  if (signal != 0)
    return text + " killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return text + " exited with code " + std::to_string(exit_code);
}

std::vector<RankExit> run_local_ranks(const LocalLaunchOptions& options,
                                      const std::function<int()>& body) {
  if (options.ranks < 1)
    throw InvalidArgument("local launch", "the number of ranks must be at least 1");
  const int started = options.started_ranks < 0 ? options.ranks : options.started_ranks;
  if (started > options.ranks) throw InvalidArgument("local launch", "started_ranks exceeds ranks");
  net::Fd listener = net::listen_on("127.0.0.1", 0);
  const int port = net::local_endpoint(listener.get()).port;
  // The job's secret: the user's, else a new one (options.env may still override it).
  const char* given = std::getenv("ARCOLL_JOB_TOKEN");
  const std::string token = given != nullptr && *given != '\0' ? given : auth::new_token();
  std::fflush(nullptr);

  const auto launch_time = Clock::now();
  std::vector<Child> children(static_cast<std::size_t>(started));
  for (int r = 0; r < started; ++r) {
    Child& c = children[static_cast<std::size_t>(r)];
    c.rank = r;
    c.exit.rank = r;
    int pipe_fds[2] = {-1, -1};
    bool piped = options.output == RankOutput::capture || r > 0;
    if (piped && ::pipe2(pipe_fds, O_CLOEXEC) != 0)
      throw SystemError("local launch", std::string("pipe(): ") + std::strerror(errno));
    c.pid = ::fork();
    if (c.pid < 0)
      throw SystemError("local launch", std::string("fork(): ") + std::strerror(errno));
    c.exit.pid = c.pid;
    if (c.pid == 0) {
      if (piped) ::close(pipe_fds[0]);
      for (int other = 0; other < r; ++other)
        if (children[static_cast<std::size_t>(other)].output_fd >= 0)
          ::close(children[static_cast<std::size_t>(other)].output_fd);
      run_child(r, options, port, token, listener.get(), piped ? pipe_fds[1] : -1, body);
    }
    if (piped) {
      ::close(pipe_fds[1]);
      c.output_fd = pipe_fds[0];
    }
  }
  listener.reset();  // rank 0 owns it now

  std::optional<Clock::time_point> first_failure, terminated;
  auto still_running = [&] {
    for (auto& c : children)
      if (c.running || c.output_fd >= 0) return true;
    return false;
  };
  while (still_running()) {
    pump_output(children, options.output, 20);
    for (auto& c : children) {
      if (!c.running) continue;
      int status = 0;
      pid_t done = ::waitpid(c.pid, &status, WNOHANG);
      if (done != c.pid) continue;
      c.running = false;
      c.exit.seconds = std::chrono::duration<double>(Clock::now() - launch_time).count();
      if (WIFSIGNALED(status))
        c.exit.signal = WTERMSIG(status);
      else
        c.exit.exit_code = WEXITSTATUS(status);
      if (!c.exit.ok() && !first_failure) first_failure = Clock::now();
    }
    if (first_failure && !terminated && Clock::now() - *first_failure > options.failure_grace) {
      terminated = Clock::now();
      for (auto& c : children)
        if (c.running) {
          if (options.output == RankOutput::forward)
            std::fprintf(stderr, "arcoll launcher: rank %d still running %.0f s after a rank "
                                 "failed: terminating it\n",
                         c.rank, std::chrono::duration<double>(options.failure_grace).count());
          ::kill(c.pid, SIGTERM);
          ::kill(c.pid, SIGCONT);  // a stopped rank acts on SIGTERM only once continued
          c.exit.killed_by_launcher = true;
        }
    }
    if (terminated && Clock::now() - *terminated > options.kill_grace)
      for (auto& c : children)
        if (c.running) ::kill(c.pid, SIGKILL);
  }
  std::vector<RankExit> exits;
  for (auto& c : children) exits.push_back(std::move(c.exit));
  return exits;
}

}  // namespace arcoll
