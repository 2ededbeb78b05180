#include "src/core/device_staging.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

namespace arcoll {
namespace {

bool inside(const void* inner, std::size_t inner_bytes, const void* outer,
            std::size_t outer_bytes) {
  const auto* i = static_cast<const char*>(inner);
  const auto* o = static_cast<const char*>(outer);
  return std::less_equal<>()(o, i) && std::less_equal<>()(i + inner_bytes, o + outer_bytes);
}

// The end of the last block of an alltoallv's buffer, in elements.
std::size_t extent(const std::size_t* counts, const std::size_t* offsets, int size) {
  std::size_t end = 0;
  for (int r = 0; r < size; ++r)
    if (counts[r] != 0) end = std::max(end, offsets[r] + counts[r]);
  return end;
}

}  // namespace

std::pair<std::size_t, std::size_t> buffer_bytes(Collective collective, const CollectiveArgs& args,
                                                 int rank, int size) {
  const std::size_t block = args.count * size_of(args.type);
  const std::size_t all = block * static_cast<std::size_t>(size);
  const bool root = rank == args.root;
  switch (collective) {
    case Collective::allreduce:
    case Collective::broadcast:
      return {block, block};
    case Collective::reduce_scatter:
      return {all, block};
    case Collective::allgather:
      return {block, all};
    case Collective::barrier:
      return {0, 0};
    case Collective::reduce:
      return {block, root ? block : 0};
    case Collective::gather:
      return {block, root ? all : 0};
    case Collective::scatter:
      return {root ? all : 0, block};
    case Collective::alltoall:
      return {all, all};
    case Collective::alltoallv:
      return {extent(args.send_counts, args.send_offsets, size) * size_of(args.type),
              extent(args.recv_counts, args.recv_offsets, size) * size_of(args.type)};
  }
  return {0, 0};
}

void copy_to_host(void* host, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  if (const DeviceMemoryInfo* memory = device_memory_of(from))
    memory->to_host(host, from, bytes);
  else
    std::memcpy(host, from, bytes);
}

void copy_from_host(void* to, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (const DeviceMemoryInfo* memory = device_memory_of(to))
    memory->to_device(to, host, bytes);
  else
    std::memcpy(to, host, bytes);
}

CallMemory memory_of_call(Collective collective, const CollectiveArgs& args, int rank, int size) {
  const auto [send_bytes, recv_bytes] = buffer_bytes(collective, args, rank, size);
  CallMemory memory;
  bool host = false;
  auto add = [&](const void* buffer, std::size_t bytes) {
    if (bytes == 0) return;
    const DeviceMemoryInfo* kind = device_memory_of(buffer);
    if (kind == nullptr)
      host = true;
    else if (memory.device != nullptr && memory.device != kind)
      memory.mixed = true;
    else
      memory.device = kind;
  };
  add(args.send, send_bytes);
  add(args.recv, recv_bytes);
  memory.mixed = memory.mixed || (host && memory.device != nullptr);
  return memory;
}

DeviceStaging::~DeviceStaging() {
  for (const Pinned& p : pinned_)
    if (p.host != nullptr) p.memory->free_host(p.host);
}

void* DeviceStaging::stage(const void* buffer, std::size_t bytes, bool read, bool written) {
  auto* device = static_cast<char*>(const_cast<void*>(buffer));
  if (bytes == 0) return device;
  for (const Staged& s : staged_)
    if (inside(device, bytes, s.device, s.bytes)) {
      char* host = s.host + (device - s.device);
      if (written) staged_.push_back({s.memory, device, host, bytes, true, true});
      return host;
    }
  const DeviceMemoryInfo* memory = device_memory_of(device);
  if (memory == nullptr) return device;
  const auto slot = static_cast<std::size_t>(
      std::count_if(staged_.begin(), staged_.end(), [](const Staged& s) { return !s.alias; }));
  if (pinned_.size() <= slot) pinned_.resize(slot + 1);
  Pinned& pinned = pinned_[slot];
  if (pinned.memory != memory || pinned.bytes < bytes) {
    if (pinned.host != nullptr) pinned.memory->free_host(std::exchange(pinned.host, nullptr));
    pinned.host = memory->allocate_host(bytes);
    pinned.memory = memory;
    pinned.bytes = bytes;
  }
  auto* host = static_cast<char*>(pinned.host);
  if (read) memory->to_host(host, device, bytes);
  staged_.push_back({memory, device, host, bytes, written, false});
  return host;
}

CollectiveArgs DeviceStaging::stage(Collective collective, const CollectiveArgs& args, int rank,
                                    int size) {
  const auto [send_bytes, recv_bytes] = buffer_bytes(collective, args, rank, size);
  CollectiveArgs staged = args;
  if (send_bytes != 0 && recv_bytes != 0 && inside(args.recv, recv_bytes, args.send, send_bytes) &&
      args.send != args.recv) {
    // In place with the receive block inside the send buffer (reduce-scatter, scatter).
    staged.send = stage(args.send, send_bytes, true, false);
    staged.recv = stage(args.recv, recv_bytes, false, true);
    return staged;
  }
  // The send data of an in-place call lies in the receive buffer; an alltoallv's receive
  // buffer keeps what lies between its blocks.
  const bool holds_send = send_bytes != 0 && inside(args.send, send_bytes, args.recv, recv_bytes);
  staged.recv =
      stage(args.recv, recv_bytes, holds_send || collective == Collective::alltoallv, true);
  staged.send = stage(args.send, send_bytes, true, false);
  return staged;
}

void DeviceStaging::finish() {
  for (const Staged& s : staged_)
    if (s.written) s.memory->to_device(s.device, s.host, s.bytes);
  staged_.clear();
}

}  // namespace arcoll
