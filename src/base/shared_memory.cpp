#include "src/base/shared_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "arcoll/error.hpp"

namespace arcoll::shared_memory {
namespace {

struct Table {
  std::mutex mutex;
  std::map<std::uintptr_t, Region> by_base;  // ordered: find() looks at the one below
  std::uint64_t next_id = 1;
  // by_base's size, read without the lock: a process that never allocates shared memory pays
  // no lock on its sends.
  std::atomic<std::size_t> regions{0};
  std::mutex listeners_mutex;  // taken alone: a listener may call find()
  std::map<int, std::function<void(const Region&)>> listeners;
  int next_listener = 1;
};

Table& table() {
  static Table* const t = new Table;  // outlives every static destructor that might free
  return *t;
}

}  // namespace

void* allocate(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t size = bytes == 0 ? page : (bytes + page - 1) / page * page;
  const int fd = ::memfd_create("arcoll-shared", MFD_CLOEXEC);
  if (fd < 0)
    throw SystemError("mem_alloc", std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int error = errno;
    ::close(fd);
    throw SystemError("mem_alloc", "cannot have " + std::to_string(size) +
                                       " B of shared memory: " + std::strerror(error));
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int error = errno;
    ::close(fd);
    throw SystemError("mem_alloc", std::string("mmap: ") + std::strerror(error));
  }
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.by_base[reinterpret_cast<std::uintptr_t>(base)] =
      Region{t.next_id++, fd, static_cast<const char*>(base), size};
  t.regions.store(t.by_base.size(), std::memory_order_relaxed);
  return base;
}

void release(void* pointer) {
  if (pointer == nullptr) return;
  Region region;
  {
    Table& t = table();
    std::lock_guard lock(t.mutex);
    auto it = t.by_base.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it == t.by_base.end())
      throw InvalidArgument("mem_free", "the pointer was not given by mem_alloc");
    region = it->second;
    t.by_base.erase(it);
    t.regions.store(t.by_base.size(), std::memory_order_relaxed);
  }
  {
    Table& t = table();
    std::lock_guard lock(t.listeners_mutex);
    for (const auto& [id, listener] : t.listeners) listener(region);
  }
  ::munmap(const_cast<char*>(region.base), region.bytes);
  ::close(region.fd);
}

std::optional<Region> find(const void* pointer, std::size_t bytes) {
  const auto at = reinterpret_cast<std::uintptr_t>(pointer);
  Table& t = table();
  if (t.regions.load(std::memory_order_relaxed) == 0) return std::nullopt;
  std::lock_guard lock(t.mutex);
  auto it = t.by_base.upper_bound(at);
  if (it == t.by_base.begin()) return std::nullopt;
  --it;
  const Region& r = it->second;
  const auto base = reinterpret_cast<std::uintptr_t>(r.base);
  if (at + bytes > base + r.bytes) return std::nullopt;
  return r;
}

int add_release_listener(std::function<void(const Region&)> listener) {
  Table& t = table();
  std::lock_guard lock(t.listeners_mutex);
  const int id = t.next_listener++;
  t.listeners.emplace(id, std::move(listener));
  return id;
}

void remove_release_listener(int id) {
  Table& t = table();
  std::lock_guard lock(t.listeners_mutex);
  t.listeners.erase(id);
}

}  // namespace arcoll::shared_memory
