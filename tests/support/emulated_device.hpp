// Device memory for the tests of machines without a GPU (src/base/device_memory.hpp's "emulated"
// kind): the address a test hands the library can be neither read nor written by the host
// (mapped without access, so a host read or write of it crashes the rank), while the kind's
// copies go through a second, readable mapping of the same pages. A call that
// works on it kept its hands off the buffer but for the kind's own operations, as a GPU's
// buffers need. Allocations can be shared with the ranks of the host, as CUDA IPC shares a
// GPU's: another process opens one through the memfd behind it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace arcoll::testing {

// `bytes` (at least one) of emulated device memory, and its release.
void* emulated_device_alloc(std::size_t bytes);
void emulated_device_free(void* device);
// Device memory that other processes cannot open (as memory of a CUDA stream-ordered pool):
// calls on it run on host copies.
void* emulated_device_alloc_unshareable(std::size_t bytes);
// Copies through the readable mapping.
void emulated_device_write(void* device, const void* host, std::size_t bytes);
std::vector<unsigned char> emulated_device_read(const void* device, std::size_t bytes);
// How many peers' allocations this process opened (shared as CUDA IPC shares them): what a
// message read from a peer's device, not staged through host copies, costs once.
std::uint64_t emulated_device_openings();
// How many copies from device to host memory the library asked of the kind in this process:
// one per buffer of a call staged whole, one per message of a call whose messages go through
// host memory one by one.
std::uint64_t emulated_device_copies_to_host();

}  // namespace arcoll::testing
