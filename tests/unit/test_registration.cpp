// The registration cache of transports/common/: a key never outlives its memory. Regions of
// mem_alloc are registered once and kept until mem_free; other memory is registered for one
// use and deregistered after it. A device that records what it holds stands for the HCA.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "arcoll/memory.hpp"
#include "transports/common/registration.hpp"

namespace arcoll::transport {
namespace {

// What the device holds registered now, by key.
struct RecordingDevice {
  std::map<std::uint32_t, std::pair<const char*, std::size_t>> held;
  std::uint32_t next = 1;
  RegistrationCache cache{
      [this](void* address, std::size_t bytes) {
        const std::uint32_t key = next++;
        held[key] = {static_cast<const char*>(address), bytes};
        return MemoryKey{key, key, key};
      },
      [this](const MemoryKey& key) { held.erase(key.lkey); }};
  // Whether a key the device holds covers [address, address + bytes).
  bool covered(const void* address, std::size_t bytes, std::uint32_t key) const {
    auto it = held.find(key);
    const auto* at = static_cast<const char*>(address);
    return it != held.end() && at >= it->second.first &&
           at + bytes <= it->second.first + it->second.second;
  }
};

TEST(RegistrationCache, SharedRegionsAreKeptUntilFreedThenRegisteredAnew) {
  RecordingDevice device;
  void* buffer = mem_alloc(1 << 20);
  auto* middle = static_cast<char*>(buffer) + 4096;
  const auto first = device.cache.acquire(middle, 1000);
  EXPECT_TRUE(first.kept);
  EXPECT_TRUE(device.covered(middle, 1000, first.key.lkey));
  // Another piece of the same region: the same registration, none made.
  const auto again = device.cache.acquire(buffer, 1 << 20);
  EXPECT_EQ(again.key.lkey, first.key.lkey);
  EXPECT_EQ(device.cache.registrations(), 1u);
  device.cache.release(again);  // kept: still held
  EXPECT_EQ(device.held.size(), 1u);
  // Freed: its key goes at once; allocated again (often at the same address): a new key.
  mem_free(buffer);
  EXPECT_TRUE(device.held.empty());
  EXPECT_EQ(device.cache.kept(), 0u);
  void* reused = mem_alloc(1 << 20);
  const auto fresh = device.cache.acquire(reused, 64);
  EXPECT_NE(fresh.key.lkey, first.key.lkey);
  EXPECT_TRUE(device.covered(reused, 64, fresh.key.lkey));
  EXPECT_FALSE(device.covered(reused, 64, first.key.lkey));
  mem_free(reused);
  EXPECT_TRUE(device.held.empty());
}

TEST(RegistrationCache, OtherMemoryIsRegisteredForOneUseOnly) {
  RecordingDevice device;
  std::vector<char> heap(100000);
  const auto registration = device.cache.acquire(heap.data(), heap.size());
  EXPECT_FALSE(registration.kept);
  EXPECT_TRUE(device.covered(heap.data(), heap.size(), registration.key.lkey));
  device.cache.release(registration);
  EXPECT_TRUE(device.held.empty());
  // Each use its own key: nothing of the heap is kept.
  const auto second = device.cache.acquire(heap.data(), 10);
  EXPECT_NE(second.key.lkey, registration.key.lkey);
  device.cache.release(second);
  EXPECT_EQ(device.cache.registrations(), 2u);
  EXPECT_EQ(device.cache.deregistrations(), 2u);
}

TEST(RegistrationCache, WhatItKeepsGoesWithIt) {
  RecordingDevice device;
  void* buffer = mem_alloc(4096);
  {
    RegistrationCache cache(
        [&](void* address, std::size_t bytes) {
          device.held[99] = {static_cast<const char*>(address), bytes};
          return MemoryKey{99, 99, 99};
        },
        [&](const MemoryKey& key) { device.held.erase(key.lkey); });
    cache.acquire(buffer, 16);
    EXPECT_EQ(device.held.count(99), 1u);
  }
  EXPECT_EQ(device.held.count(99), 0u);
  mem_free(buffer);  // the gone cache hears nothing of it
}

}  // namespace
}  // namespace arcoll::transport
