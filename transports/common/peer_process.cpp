#include "transports/common/peer_process.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace arcoll::transport {
namespace {

std::string boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  return std::getline(file, id) && !id.empty() ? id : "unknown-boot";
}

unsigned long long pid_namespace() {
  struct stat ns {};
  return ::stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<unsigned long long>(ns.st_ino) : 0;
}

}  // namespace

std::string this_process_identity() {
  return boot_id() + " " + std::to_string(pid_namespace()) + " " + std::to_string(::getpid());
}

net::Fd watch_if_local(const std::string& identity) {
  std::istringstream in(identity);
  std::string boot;
  unsigned long long ns = 0;
  long pid = 0;
  if (!(in >> boot >> ns >> pid) || pid <= 0 || ns == 0 || ns != pid_namespace() ||
      boot != boot_id())
    return {};
  return net::Fd(static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)));
}

bool has_ended(const net::Fd& pidfd) {
  if (!pidfd) return false;
  pollfd readable{pidfd.get(), POLLIN, 0};
  return ::poll(&readable, 1, 0) > 0;
}

}  // namespace arcoll::transport
