// Inputs and double-precision references for checking collectives in tests.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "arcoll/types.hpp"

namespace arcoll::testing {

// Element i of `buffer` as a double / stored from a double (rounded like the library does).
double load(const void* buffer, DataType type, std::size_t i);
void store(void* buffer, DataType type, std::size_t i, double value);

// A typed buffer of `count` elements holding rank `rank`'s input for `op`: values chosen so
// that the exact result is representable (small integers; mostly 1 with a few 2 and -1 for prod).
std::vector<unsigned char> make_input(DataType type, ReduceOp op, int rank, std::size_t count,
                                      std::size_t salt = 0);
// The same input written into `buffer` (of `count` elements), and how many elements of
// `buffer` differ from it.
void write_input(void* buffer, DataType type, ReduceOp op, int rank, std::size_t count,
                 std::size_t salt = 0);
std::size_t count_not_input(const void* buffer, DataType type, ReduceOp op, int rank,
                            std::size_t count, std::size_t salt = 0);

// The reduction over ranks 0..world-1 of element i, computed in double (integer sum and
// prod wrap like the type).
double expected(DataType type, ReduceOp op, int world, std::size_t i, std::size_t salt = 0);

// Elements of `buffer` that differ from expected() beyond the type's rounding.
std::size_t count_wrong(const void* buffer, DataType type, ReduceOp op, int world,
                        std::size_t count, std::size_t salt = 0, std::size_t first_index = 0);

}  // namespace arcoll::testing

namespace arcoll {
class Communicator;
namespace testing {
// "f32/sum count 7 in-place": a case, in assertion messages.
std::string label(DataType t, ReduceOp op, std::size_t count, bool in_place);
// All-reduce of every count of the suite (0, 1, primes, counts around the world size, across
// the eager limit, several pipeline chunks) checked element by element against the reference
// (gtest assertions); `salt` varies the inputs. every_pair: every type with every op, in place
// and not. sampled: every type with sum, every op with f32, bf16 and i64, in place and not
// alternately (both for f32 sum). `memory`: where the buffers live, the heap,
// arcoll::mem_alloc (read in place by peers on the host; with a count more, whose messages are
// large enough to be), or emulated device memory (tests/support/emulated_device.hpp).
enum class Coverage { every_pair, sampled };
enum class Memory { heap, shared, device };

// `bytes` bytes in memory of the kind asked for, then one more, the sentinel (0xAB), that a
// call writing past the end overwrites. Host buffers are filled, compared and checked where
// they lie, with memcpy: under AddressSanitizer memmove (std::copy, a vector's copy) copies
// byte by byte, and where a page's first touch is dear (a PVM guest: 12-23 us) each fresh copy
// costs its pages again; a copy per check was most of these tests' time.
class TestBuffer {
 public:
  static constexpr unsigned char kSentinel = 0xAB;

  TestBuffer(std::size_t bytes, Memory memory);
  ~TestBuffer();
  TestBuffer(const TestBuffer&) = delete;
  TestBuffer& operator=(const TestBuffer&) = delete;
  // Holds `contents` (of the buffer's size), then the sentinel.
  void fill(const unsigned char* contents);
  // Holds `byte` throughout, then the sentinel.
  void fill(unsigned char byte);
  // Holds rank `rank`'s reference input (make_input), then the sentinel: written where it
  // lies, but for a device buffer.
  void fill_input(DataType type, ReduceOp op, int rank, std::size_t count, std::size_t salt);
  unsigned char* data() { return data_; }
  // The contents and the sentinel, readable by the host: the buffer itself but on a device,
  // read back (valid until the next call).
  const unsigned char* readable();

 private:
  std::size_t size_;
  Memory memory_;
  unsigned char* data_;
  std::vector<unsigned char> read_back_;  // of a device buffer
};

// One all-reduce of the reference input of `count` elements, in place or not, on buffers in
// `memory`: how many elements of the result differ from the reference (gtest assertions that
// the input is left as it was and nothing is written past the result's end).
std::size_t allreduce_wrong(Communicator& comm, DataType t, ReduceOp op, std::size_t count,
                            std::size_t salt, bool in_place, Memory memory = Memory::heap);
void check_allreduce(Communicator& comm, std::size_t salt, Coverage coverage,
                     Memory memory = Memory::heap);
}  // namespace testing
}  // namespace arcoll
