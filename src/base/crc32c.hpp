// CRC32C (Castagnoli), the checksum of ARCOLL_CHECKSUM: with the SSE 4.2 instruction where the
// CPU has it, else table-driven.
#pragma once

#include <cstddef>
#include <cstdint>

namespace arcoll {

// The CRC32C of `bytes` bytes at `data`, continuing from `crc` (0 to start).
std::uint32_t crc32c(const void* data, std::size_t bytes, std::uint32_t crc = 0);
// The table-driven version, for checking the hardware one.
std::uint32_t crc32c_portable(const void* data, std::size_t bytes, std::uint32_t crc = 0);

}  // namespace arcoll
