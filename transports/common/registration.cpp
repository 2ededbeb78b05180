#include "transports/common/registration.hpp"

#include <utility>

#include "src/base/shared_memory.hpp"

namespace arcoll::transport {

RegistrationCache::RegistrationCache(Register register_memory, Deregister deregister_memory)
    : register_(std::move(register_memory)), deregister_(std::move(deregister_memory)) {
  listener_ = shared_memory::add_release_listener(
      [this](const shared_memory::Region& region) { forget(region.base); });
}

RegistrationCache::~RegistrationCache() {
  shared_memory::remove_release_listener(listener_);
  std::lock_guard lock(mutex_);
  for (const auto& [base, key] : kept_) {
    deregister_(key);
    ++deregistrations_;
  }
}

RegistrationCache::Registration RegistrationCache::acquire(void* address, std::size_t bytes) {
  if (const auto region = shared_memory::find(address, bytes)) {
    std::lock_guard lock(mutex_);
    auto it = kept_.find(region->base);
    if (it == kept_.end()) {
      it = kept_.emplace(region->base,
                         register_(const_cast<char*>(region->base), region->bytes)).first;
      ++registrations_;
    }
    return {it->second, true};
  }
  const MemoryKey key = register_(address, bytes);
  std::lock_guard lock(mutex_);
  ++registrations_;
  return {key, false};
}

void RegistrationCache::release(const Registration& registration) {
  if (registration.kept) return;
  deregister_(registration.key);
  std::lock_guard lock(mutex_);
  ++deregistrations_;
}

void RegistrationCache::forget(const char* base) {
  std::lock_guard lock(mutex_);
  auto it = kept_.find(base);
  if (it == kept_.end()) return;
  deregister_(it->second);
  ++deregistrations_;
  kept_.erase(it);
}

std::size_t RegistrationCache::kept() const {
  std::lock_guard lock(mutex_);
  return kept_.size();
}

std::uint64_t RegistrationCache::registrations() const {
  std::lock_guard lock(mutex_);
  return registrations_;
}

std::uint64_t RegistrationCache::deregistrations() const {
  std::lock_guard lock(mutex_);
  return deregistrations_;
}

}  // namespace arcoll::transport
