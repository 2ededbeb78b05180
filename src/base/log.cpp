#include "src/base/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace arcoll::log {
namespace {

std::atomic<int> g_rank{-1};

bool debug_enabled() {
  static const bool enabled = [] {
    const char* level = std::getenv("ARCOLL_LOG");
    return level != nullptr && std::strcmp(level, "debug") == 0;
  }();
  return enabled;
}

void emit(const char* level, const std::string& message) {
  std::string line = "arcoll";
  if (int rank = g_rank.load(); rank >= 0) line += " rank " + std::to_string(rank);
  line += " ";
  line += level;
  line += ": " + message + "\n";
  // One write() per line keeps lines of concurrent ranks from interleaving.
  [[maybe_unused]] auto n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace

void set_rank(int rank) {
  g_rank = rank;
}
void debug(const std::string& message) {
  if (debug_enabled()) emit("debug", message);
}
void warn(const std::string& message) {
  emit("warning", message);
}
void error(const std::string& message) {
  emit("error", message);
}

}  // namespace arcoll::log
