#include "transports/shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "src/base/store.hpp"

namespace arcoll::shm {
namespace {

std::size_t segment_bytes(int size) {
  return sizeof(SegmentHeader) + static_cast<std::size_t>(size) * sizeof(Ring) + kBoardBytes;
}

// Takes the pages of the segment this rank's peers on the host use (its header, their rings,
// its board) from /dev/shm now: a /dev/shm too small for them (a container's default size)
// is then an error here rather than a SIGBUS when a ring first fills.
void reserve(int fd, const TransportSetup& setup) {
  std::vector<std::pair<std::size_t, std::size_t>> ranges{{0, sizeof(SegmentHeader)}};
  for (int p : setup.peers)
    ranges.emplace_back(sizeof(SegmentHeader) + static_cast<std::size_t>(p) * sizeof(Ring),
                        sizeof(Ring));
  ranges.emplace_back(segment_bytes(setup.size) - kBoardBytes, kBoardBytes);
  std::size_t total = 0;
  for (const auto& [offset, bytes] : ranges) total += bytes;
  for (const auto& [offset, bytes] : ranges) {
    const int error =
        ::posix_fallocate(fd, static_cast<off_t>(offset), static_cast<off_t>(bytes));
    if (error != 0 && error != EOPNOTSUPP && error != EINVAL)
      throw SystemError("shm setup",
                        "/dev/shm has no room for this rank's " + std::to_string(total >> 20) +
                            " MiB of rings (" + std::strerror(error) +
                            "); a container needs a larger /dev/shm (docker run --shm-size)",
                        setup.rank);
  }
}

constexpr const char* kSegmentPrefix = "arcoll-";

std::string segment_name(std::uint64_t job, int rank) {
  char name[64];
  std::snprintf(name, sizeof name, "/%s%016llx-%d", kSegmentPrefix,
                static_cast<unsigned long long>(job), rank);
  return name;
}

// Process `pid` as /proc/<pid>/stat gives it: its state (field 3: 'Z' for a zombie) and when
// it started (field 22, clock ticks after boot); nullopt when there is no such process.
struct ProcessStat {
  char state = '?';
  std::uint64_t start = 0;
};
std::optional<ProcessStat> process_stat(int pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(file, stat)) return std::nullopt;
  // After the command, which may hold spaces and parentheses.
  const std::size_t after = stat.rfind(')');
  if (after == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(after + 1));
  ProcessStat result;
  std::string field;
  for (int n = 3; n <= 22 && fields >> field; ++n) {
    if (n == 3) result.state = field[0];
    if (n == 22) result.start = std::strtoull(field.c_str(), nullptr, 10);
  }
  return result;
}

std::uint64_t own_pid_namespace() {
  struct stat ns {};
  return ::stat("/proc/self/ns/pid", &ns) == 0 ? static_cast<std::uint64_t>(ns.st_ino) : 0;
}

// Removes the name of our segment when setup ends, however it ends: once every rank has mapped
// every segment, or on failure.
class Unlinker {
 public:
  explicit Unlinker(std::string name) : name_(std::move(name)) {}
  Unlinker(const Unlinker&) = delete;
  Unlinker& operator=(const Unlinker&) = delete;
  ~Unlinker() { ::shm_unlink(name_.c_str()); }

 private:
  std::string name_;
};

Mapping map_shared(int fd, std::size_t bytes, int rank, int peer) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    throw SystemError("shm setup", std::string("mmap: ") + std::strerror(errno), rank, peer);
  return Mapping(base, bytes);
}

}  // namespace

SegmentOwner this_process() {
  SegmentOwner owner;
  owner.pid = ::getpid();
  owner.start = process_stat(owner.pid).value_or(ProcessStat{}).start;
  owner.pid_namespace = own_pid_namespace();
  return owner;
}

bool has_ended(const SegmentOwner& owner) {
  if (owner.pid <= 0 || owner.pid_namespace == 0 || owner.pid_namespace != own_pid_namespace())
    return false;
  const auto process = process_stat(owner.pid);
  // Gone, dead but not yet reaped, or its pid reused by another process.
  return !process || process->state == 'Z' || process->state == 'X' ||
         (owner.start != 0 && process->start != owner.start);
}

int remove_abandoned_segments(std::chrono::seconds unowned_age) {
  int removed = 0;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (!name.starts_with(kSegmentPrefix)) continue;
    net::Fd fd(::openat(::dirfd(dir), name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    struct stat info {};
    if (!fd || ::fstat(fd.get(), &info) != 0) continue;
    SegmentOwner owner;
    const bool read = ::pread(fd.get(), &owner, sizeof owner, offsetof(SegmentHeader, owner)) ==
                      static_cast<ssize_t>(sizeof owner);
    const bool owned = read && owner.pid > 0;
    const auto age = std::chrono::system_clock::now() -
                     std::chrono::system_clock::from_time_t(info.st_mtime);
    if (owned ? !has_ended(owner) : age < unowned_age) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) {
      ++removed;
      log::debug("shm: removed " + name + ", left by " +
                 (owned ? "process " + std::to_string(owner.pid) + ", which has ended"
                        : std::string("a process that never finished creating it")));
    }
  }
  ::closedir(dir);
  return removed;
}

Ring* ring_of(void* segment, int writer) {
  return reinterpret_cast<Ring*>(static_cast<char*>(segment) + sizeof(SegmentHeader)) + writer;
}

std::byte* board_in(void* segment, int size) {
  return reinterpret_cast<std::byte*>(ring_of(segment, size));
}

SegmentHeader* header_of(void* segment) {
  return static_cast<SegmentHeader*>(segment);
}

bool join_remote_barriers() {
  constexpr long kNeeded =
      MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  // Asked in each transport's setup: registering again costs a system call and nothing more,
  // and a process need not know what the one it was forked from did.
  const long commands = ::syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return commands >= 0 && (commands & kNeeded) == kNeeded &&
         ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

bool remote_barrier() {
  return ::syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0;
}

Mapping::Mapping(Mapping&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), bytes_(other.bytes_) {}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = other.bytes_;
  }
  return *this;
}

Mapping::~Mapping() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

Segments::Segments(const TransportSetup& setup, bool single_copy)
    : peers_(static_cast<std::size_t>(setup.size)), cma_(single_copy) {
  if (setup.peers.empty()) return;
  remove_abandoned_segments();
  try {
    set_up(setup);
  } catch (const Error&) {
    // A peer that died while setting up left its segment: it goes now, not at the next start.
    remove_abandoned_segments();
    throw;
  }
}

void Segments::set_up(const TransportSetup& setup) {
  const int rank = setup.rank;
  const std::size_t bytes = segment_bytes(setup.size);
  const std::string own_name = segment_name(setup.job_id, rank);
  net::Fd fd(::shm_open(own_name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd)
    throw SystemError("shm setup", "shm_open(" + own_name + "): " + std::strerror(errno), rank);
  const Unlinker unlink_own(own_name);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    throw SystemError(
        "shm setup",
        "ftruncate of " + std::to_string(bytes) + " B in /dev/shm: " + std::strerror(errno), rank);
  }
  reserve(fd.get(), setup);
  own_ = map_shared(fd.get(), bytes, rank, Error::kNoRank);
  header_of(own())->owner = this_process();
  header_of(own())->barriers_before_sleep.store(join_remote_barriers() ? 1 : 0,
                                                std::memory_order_relaxed);
  bool reads = true;  // whether this rank may read every peer's memory (probed below)
  const bool sends_to_be_read = cma_;  // as asked (single_copy)
  // Peers learn our pid (for cross-memory reads and liveness) and where our segment sits in
  // our address space (to probe whether cross-memory reads are allowed).
  setup.store->set(
      "shm/ready/" + std::to_string(rank),
      std::to_string(::getpid()) + " " + std::to_string(reinterpret_cast<std::uintptr_t>(own())));
  for (int p : setup.peers) {
    auto ready = setup.store->get("shm/ready/" + std::to_string(p), setup.deadline);
    if (!ready)
      throw TimeoutError("shm setup", "rank " + std::to_string(p) + " never created its segment",
                         rank, p);
    PeerSegment& mapped = peer(p);
    unsigned long long address = 0;
    if (std::sscanf(ready->c_str(), "%d %llu", &mapped.pid, &address) != 2)
      throw ProtocolError("shm setup", "malformed segment announcement '" + *ready + "'", rank, p);
    net::Fd peer_fd(::shm_open(segment_name(setup.job_id, p).c_str(), O_RDWR | O_CLOEXEC, 0));
    if (!peer_fd)
      throw SystemError("shm setup",
                        "cannot open rank " + std::to_string(p) +
                            "'s segment: " + std::strerror(errno) + " (is it on another host?)",
                        rank, p);
    mapped.segment = map_shared(peer_fd.get(), bytes, rank, p);
    mapped.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, mapped.pid, 0)));
    if (!reads) continue;
    std::int32_t probe = 0;
    iovec local{&probe, sizeof probe};
    iovec remote{reinterpret_cast<void*>(address + offsetof(SegmentHeader, owner) +
                                         offsetof(SegmentOwner, pid)),
                 sizeof probe};
    const ssize_t got = ::process_vm_readv(mapped.pid, &local, 1, &remote, 1, 0);
    if (got != static_cast<ssize_t>(sizeof probe) || probe != mapped.pid) {
      const std::string why = got < 0 ? std::strerror(errno) : "read another process";
      reads = false;
      if (cma_)
        log::warn("shm transport: cross-memory attach to rank " + std::to_string(p) +
                  " is not allowed (" + why + "); large messages are copied through shared memory");
      cma_ = false;
    }
  }
  // Every rank has mapped every segment once all have said so: then the names can go. Each
  // also says whether it reads its peers' memory. A large message is read by its receiver,
  // and permission can be one way (ptrace rules: capabilities, dumpable processes), so the
  // ranks send that way only if every rank reads every other.
  // "reads": and sends large messages to be read (single_copy); "reads, copies": does not.
  setup.store->set("shm/mapped/" + std::to_string(rank),
                   !reads ? "denied" : (sends_to_be_read ? "reads" : "reads, copies"));
  every_rank_reads_ = reads && sends_to_be_read;
  for (int p : setup.peers) {
    auto mapped = setup.store->get("shm/mapped/" + std::to_string(p), setup.deadline);
    if (!mapped)
      throw TimeoutError("shm setup", "rank " + std::to_string(p) + " did not map the segments",
                         rank, p);
    if (*mapped != "reads") every_rank_reads_ = false;
    if (cma_ && mapped->rfind("reads", 0) != 0) {
      cma_ = false;
      log::warn("shm transport: rank " + std::to_string(p) +
                " may not read its peers' memory across processes; large messages are copied "
                "through shared memory");
    }
  }
  // Every rank removes every name, not only its own: a peer killed between here and its own
  // removal leaves none behind.
  for (int p : setup.peers) ::shm_unlink(segment_name(setup.job_id, p).c_str());
}

}  // namespace arcoll::shm
