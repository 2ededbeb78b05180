// The message engine's part in calls on device memory (src/base/device_memory.hpp): which
// transports take such buffers as they are, which of a call's buffers are device memory, its
// device scratch, sends copied to host memory for transports that cannot read them, point-to-
// point messages on device buffers, and copies within a rank.
#include <algorithm>
#include <cstring>

#include "src/base/device_memory.hpp"
#include "src/core/engine.hpp"

namespace arcoll {

bool Engine::routes_device(int peer, const DeviceMemoryInfo& memory) const {
  return !options_.checksum && memory.shareable &&
         route_[static_cast<std::size_t>(peer)]->takes(memory);
}

bool Engine::takes_device(int peer, const DeviceMemoryInfo& memory, const void* buffer) const {
  return routes_device(peer, memory) && memory.shareable(buffer);
}

bool Engine::takes_device_everywhere(const DeviceMemoryInfo& memory,
                                     std::span<const void* const> buffers) const {
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_ && !routes_device(peer, memory)) return false;
  return std::all_of(buffers.begin(), buffers.end(),
                     [&](const void* buffer) { return memory.shareable(buffer); });
}

RequestPtr Engine::post_tagged(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                               std::uint32_t tag, const DeviceMemoryInfo* memory) {
  if (memory == nullptr) return post(kind, peer, buffer, bytes, tag, {});
  RequestPtr request = make_request(kind, peer, buffer, bytes, tag, std::nullopt);
  request->memory = memory;
  route_[static_cast<std::size_t>(peer)]->post(request);
  return request;
}

const DeviceMemoryInfo* Engine::sent_from_host_copy(int peer, const void* buffer,
                                                    std::size_t bytes) const {
  if (bytes == 0) return nullptr;
  const DeviceMemoryInfo* memory = memory_of(buffer);
  return memory != nullptr && !takes_device(peer, *memory, buffer) ? memory : nullptr;
}

const DeviceMemoryInfo* Engine::memory_of(const void* buffer) const {
  if (call_.memory == nullptr) return nullptr;
  const auto* at = static_cast<const std::byte*>(buffer);
  auto within = [at](const std::byte* begin, std::size_t bytes) {
    return at >= begin && at < begin + bytes;
  };
  for (const auto& b : call_.device_buffers)
    if (within(b.data(), b.size())) return call_.memory;
  for (const DeviceScratch& s : device_scratch_)
    if (within(static_cast<const std::byte*>(s.buffer), s.bytes)) return s.memory;
  return nullptr;
}

void* Engine::device_scratch(std::size_t bytes, int slot) {
  if (device_scratch_.size() <= static_cast<std::size_t>(slot))
    device_scratch_.resize(static_cast<std::size_t>(slot) + 1);
  DeviceScratch& s = device_scratch_[static_cast<std::size_t>(slot)];
  if (s.bytes < bytes || s.memory != call_.memory) {
    if (s.buffer != nullptr) s.memory->free(s.buffer);
    s = {};
    const auto& [send, recv] = call_.device_buffers;  // on the device of the call's buffers
    s.buffer = call_.memory->allocate(bytes, recv.empty() ? send.data() : recv.data());
    s.memory = call_.memory;
    s.bytes = bytes;
  }
  return s.buffer;
}

void Engine::free_device_scratch() noexcept {
  for (const DeviceScratch& s : device_scratch_)
    if (s.buffer != nullptr) s.memory->free(s.buffer);
  device_scratch_.clear();
}

void Engine::copy(void* to, const void* from, std::size_t bytes) {
  if (to == from || bytes == 0) return;
  const DeviceMemoryInfo* memory = memory_of(to);
  if (memory == nullptr) memory = memory_of(from);
  if (memory != nullptr)
    memory->copy(to, from, bytes);
  else
    std::memmove(to, from, bytes);
}

}  // namespace arcoll
