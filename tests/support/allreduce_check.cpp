#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/memory.hpp"
#include "tests/support/emulated_device.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

const std::size_t kCounts[] = {0, 1, 2, 3, 5, 7, 13, 64, 1000, 4099, 20011, 65537};
// On shared buffers, one more, whose messages reach the size read in place (512 KiB): in f32,
// on 2, 4 and 8 ranks, where auto runs halving-doubling. (On 3 and 5 it runs rings, of two
// channels and of one, whose messages stay smaller; the forwarding tests read in place on 3.)
constexpr std::size_t kReadInPlaceCount = 600'011;

}  // namespace

std::string label(DataType t, ReduceOp op, std::size_t count, bool in_place) {
  return std::string(to_string(t)) + "/" + std::string(to_string(op)) + " count " +
         std::to_string(count) + (in_place ? " in-place" : " out-of-place");
}

namespace {

void* allocate(std::size_t bytes, Memory memory) {
  switch (memory) {
    case Memory::shared:
      return mem_alloc(bytes);
    case Memory::device:
      return emulated_device_alloc(bytes);
    case Memory::heap:
      break;
  }
  return std::malloc(bytes);
}

}  // namespace

TestBuffer::TestBuffer(std::size_t bytes, Memory memory)
    : size_(bytes),
      memory_(memory),
      data_(static_cast<unsigned char*>(allocate(bytes + 1, memory))) {}

TestBuffer::~TestBuffer() {
  if (memory_ == Memory::shared)
    mem_free(data_);
  else if (memory_ == Memory::device)
    emulated_device_free(data_);
  else
    std::free(data_);
}

void TestBuffer::fill(const unsigned char* contents) {
  if (memory_ == Memory::device) {
    emulated_device_write(data_, contents, size_);
    emulated_device_write(data_ + size_, &kSentinel, 1);
    return;
  }
  if (size_ != 0) std::memcpy(data_, contents, size_);
  data_[size_] = kSentinel;
}

void TestBuffer::fill(unsigned char byte) {
  if (memory_ == Memory::device) {
    fill(std::vector<unsigned char>(size_, byte).data());
    return;
  }
  std::memset(data_, byte, size_);
  data_[size_] = kSentinel;
}

void TestBuffer::fill_input(DataType type, ReduceOp op, int rank, std::size_t count,
                            std::size_t salt) {
  if (memory_ == Memory::device) {
    fill(make_input(type, op, rank, count, salt).data());
    return;
  }
  write_input(data_, type, op, rank, count, salt);
  data_[size_] = kSentinel;
}

const unsigned char* TestBuffer::readable() {
  if (memory_ != Memory::device) return data_;
  read_back_ = emulated_device_read(data_, size_ + 1);
  return read_back_.data();
}

std::size_t allreduce_wrong(Communicator& comm, DataType t, ReduceOp op, std::size_t count,
                            std::size_t salt, bool in_place, Memory memory) {
  const std::size_t bytes = count * size_of(t);
  TestBuffer out(bytes, memory);
  if (in_place) {
    out.fill_input(t, op, comm.rank(), count, salt);
    comm.allreduce(out.data(), count, t, op);
  } else {
    TestBuffer input(bytes, memory);
    input.fill_input(t, op, comm.rank(), count, salt);
    out.fill(TestBuffer::kSentinel);
    comm.allreduce(input.data(), out.data(), count, t, op);
    EXPECT_EQ(count_not_input(input.readable(), t, op, comm.rank(), count, salt), 0u)
        << "input modified: " << label(t, op, count, in_place);
  }
  const unsigned char* result = out.readable();
  EXPECT_EQ(result[bytes], TestBuffer::kSentinel)
      << "wrote past the end: " << label(t, op, count, in_place);
  return count_wrong(result, t, op, comm.size(), count, salt);
}

void check_allreduce(Communicator& comm, std::size_t salt, Coverage coverage, Memory memory) {
  const bool every = coverage == Coverage::every_pair;
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!is_supported(t, op)) continue;
      // Sampled: the reduction kernels' unit tests cover every pair; here every type goes
      // through the algorithm with sum, every op with a 32-bit float, a 16-bit float and a
      // 64-bit integer.
      const bool sampled_pair =
          op == ReduceOp::sum || t == DataType::f32 || t == DataType::bf16 || t == DataType::i64;
      if (!every && !sampled_pair) continue;
      const bool both_modes = every || (t == DataType::f32 && op == ReduceOp::sum);
      std::vector<std::size_t> counts(std::begin(kCounts), std::end(kCounts));
      if (memory == Memory::shared) counts.push_back(kReadInPlaceCount);
      std::size_t index = 0;
      for (std::size_t count : counts) {
        ++index;
        for (bool in_place : {false, true}) {
          if (!both_modes && in_place != (index % 2 == 0)) continue;  // alternate by count
          EXPECT_EQ(allreduce_wrong(comm, t, op, count, salt, in_place, memory), 0u)
              << label(t, op, count, in_place) << " on rank " << comm.rank();
        }
      }
    }
  }
}

}  // namespace arcoll::testing
