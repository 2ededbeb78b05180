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

// A copy of `bytes` in memory of the kind asked for, 0xAB past its end (an overrun sentinel).
class TestBuffer {
 public:
  TestBuffer(const std::vector<unsigned char>& bytes, Memory memory)
      : size_(bytes.size()), memory_(memory), data_(static_cast<unsigned char*>(allocate())) {
    std::vector<unsigned char> filled(bytes);
    filled.push_back(0xAB);
    if (memory_ == Memory::device)
      emulated_device_write(data_, filled.data(), filled.size());
    else
      std::copy(filled.begin(), filled.end(), data_);
  }
  TestBuffer(const TestBuffer&) = delete;
  TestBuffer& operator=(const TestBuffer&) = delete;
  ~TestBuffer() {
    if (memory_ == Memory::shared)
      mem_free(data_);
    else if (memory_ == Memory::device)
      emulated_device_free(data_);
    else
      std::free(data_);
  }
  unsigned char* data() { return data_; }
  std::vector<unsigned char> contents() const {
    auto all = with_sentinel();
    all.pop_back();
    return all;
  }
  unsigned char sentinel() const { return with_sentinel().back(); }

 private:
  void* allocate() const {
    switch (memory_) {
      case Memory::shared:
        return mem_alloc(size_ + 1);
      case Memory::device:
        return emulated_device_alloc(size_ + 1);
      case Memory::heap:
        break;
    }
    return std::malloc(size_ + 1);
  }
  std::vector<unsigned char> with_sentinel() const {
    if (memory_ == Memory::device) return emulated_device_read(data_, size_ + 1);
    return {data_, data_ + size_ + 1};
  }

  std::size_t size_;
  Memory memory_;
  unsigned char* data_;
};

std::size_t allreduce_wrong(Communicator& comm, DataType t, ReduceOp op, std::size_t count,
                            std::size_t salt, bool in_place, Memory memory) {
  const auto input_bytes = make_input(t, op, comm.rank(), count, salt);
  TestBuffer input(input_bytes, memory);
  const std::vector<unsigned char> unset(input_bytes.size(), 0xAB);
  TestBuffer out(in_place ? input_bytes : unset, memory);
  if (in_place) {
    comm.allreduce(out.data(), count, t, op);
  } else {
    comm.allreduce(input.data(), out.data(), count, t, op);
    EXPECT_EQ(input.contents(), input_bytes) << "input modified: " << label(t, op, count, in_place);
  }
  EXPECT_EQ(out.sentinel(), 0xAB) << "wrote past the end: " << label(t, op, count, in_place);
  return count_wrong(out.contents().data(), t, op, comm.size(), count, salt);
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
