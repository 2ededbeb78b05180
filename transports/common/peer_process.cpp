#include "transports/common/peer_process.hpp"

#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
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

// The page of last words: the reason's length is written last, after the reason and the call.
struct Page {
  std::atomic<std::uint32_t> length;  // 0: nothing said
  std::uint32_t unused;
  std::uint64_t failed_call;
  char reason[4096 - 16];
};
static_assert(sizeof(Page) == 4096);

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

LastWords::LastWords(int world_size) : peers_(static_cast<std::size_t>(world_size), nullptr) {
  memfd_.reset(::memfd_create("arcoll-last-words", MFD_CLOEXEC));
  if (!memfd_ || ::ftruncate(memfd_.get(), sizeof(Page)) != 0) return;
  void* page = ::mmap(nullptr, sizeof(Page), PROT_READ | PROT_WRITE, MAP_SHARED, memfd_.get(), 0);
  if (page != MAP_FAILED) own_ = page;
}

LastWords::~LastWords() {
  for (void* page : peers_)
    if (page != nullptr) ::munmap(page, sizeof(Page));
  if (own_ != nullptr) ::munmap(own_, sizeof(Page));
}

std::string LastWords::identity() const {
  return this_process_identity() + " " + std::to_string(own_ != nullptr ? memfd_.get() : -1);
}

void LastWords::watch(int peer, const std::string& identity) {
  std::istringstream in(identity);
  std::string boot, ns, pid;
  int fd = -1;
  if (!(in >> boot >> ns >> pid >> fd) || fd < 0) return;
  net::Fd pidfd = watch_if_local(identity);
  if (!pidfd) return;
  net::Fd theirs(static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd.get(), fd, 0)));
  if (!theirs) return;  // no ptrace permission between the ranks: no last words
  void* page = ::mmap(nullptr, sizeof(Page), PROT_READ, MAP_SHARED, theirs.get(), 0);
  if (page != MAP_FAILED) peers_[static_cast<std::size_t>(peer)] = page;
}

void LastWords::say(const std::string& reason, std::uint64_t failed_call) noexcept {
  auto* page = static_cast<Page*>(own_);
  if (page == nullptr || page->length.load() != 0) return;
  const std::size_t n = std::min(reason.size(), sizeof page->reason);
  std::memcpy(page->reason, reason.data(), n);
  page->failed_call = failed_call;
  page->length.store(static_cast<std::uint32_t>(std::max<std::size_t>(n, 1)),
                     std::memory_order_release);
}

std::optional<LastWords::Words> LastWords::of(int peer) const {
  const auto* page = static_cast<const Page*>(peers_[static_cast<std::size_t>(peer)]);
  if (page == nullptr) return std::nullopt;
  const std::uint32_t length = page->length.load(std::memory_order_acquire);
  if (length == 0) return std::nullopt;
  return Words{std::string(page->reason, std::min<std::size_t>(length, sizeof page->reason)),
               page->failed_call};
}

}  // namespace arcoll::transport
