#include "tests/support/emulated_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>

#include "src/base/device_memory.hpp"

namespace arcoll::testing {
namespace {

struct Region {
  char* readable;
  std::size_t bytes;
};

// Both mappings of each allocation, by the address of the one without access.
struct Regions {
  std::mutex mutex;
  std::map<const char*, Region, std::greater<>> by_device;
};
Regions& regions() {
  static Regions r;
  return r;
}

// The readable address of `device`, nullptr when it lies in no allocation.
char* readable(const void* device) {
  const auto* d = static_cast<const char*>(device);
  Regions& r = regions();
  std::lock_guard lock(r.mutex);
  const auto it = r.by_device.lower_bound(d);  // the last allocation starting at or before d
  if (it == r.by_device.end() || d >= it->first + it->second.bytes) return nullptr;
  return it->second.readable + (d - it->first);
}

char* readable_or_throw(const void* device) {
  char* at = readable(device);
  if (at == nullptr) throw std::logic_error("emulated device: not its memory");
  return at;
}

const DeviceMemoryRegistrar kEmulatedDevice{{
    "emulated",
    [](const void* address) { return readable(address) != nullptr; },
    [](void* host, const void* device, std::size_t bytes) {
      std::memcpy(host, readable_or_throw(device), bytes);
    },
    [](void* device, const void* host, std::size_t bytes) {
      std::memcpy(readable_or_throw(device), host, bytes);
    },
    [](std::size_t bytes) { return std::malloc(bytes); },
    [](void* host) { std::free(host); },
}};

}  // namespace

void* emulated_device_alloc(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t mapped = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  const int fd = ::memfd_create("arcoll-emulated-device", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(mapped)) != 0)
    throw std::runtime_error("emulated device: memfd failed");
  void* device = ::mmap(nullptr, mapped, PROT_NONE, MAP_SHARED, fd, 0);
  void* alias = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (device == MAP_FAILED || alias == MAP_FAILED)
    throw std::runtime_error("emulated device: mmap failed");
  Regions& r = regions();
  std::lock_guard lock(r.mutex);
  r.by_device[static_cast<char*>(device)] = {static_cast<char*>(alias), mapped};
  return device;
}

void emulated_device_free(void* device) {
  Regions& r = regions();
  std::lock_guard lock(r.mutex);
  const auto it = r.by_device.find(static_cast<const char*>(device));
  if (it == r.by_device.end()) return;
  ::munmap(device, it->second.bytes);
  ::munmap(it->second.readable, it->second.bytes);
  r.by_device.erase(it);
}

void emulated_device_write(void* device, const void* host, std::size_t bytes) {
  if (bytes != 0) std::memcpy(readable_or_throw(device), host, bytes);
}

std::vector<unsigned char> emulated_device_read(const void* device, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  if (bytes != 0) std::memcpy(out.data(), readable_or_throw(device), bytes);
  return out;
}

}  // namespace arcoll::testing
