#include <gtest/gtest.h>

#include <cstring>

#include "arcoll/communicator.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

const std::size_t kCounts[] = {0, 1, 2, 3, 5, 7, 13, 64, 1000, 4099, 20011, 131101};

}  // namespace

std::string label(DataType t, ReduceOp op, std::size_t count, bool in_place) {
  return std::string(to_string(t)) + "/" + std::string(to_string(op)) + " count " +
         std::to_string(count) + (in_place ? " in-place" : " out-of-place");
}

void check_allreduce_all_types(Communicator& comm, std::size_t salt) {
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!is_supported(t, op)) continue;
      for (std::size_t count : kCounts) {
        for (bool in_place : {false, true}) {
          auto input = make_input(t, op, comm.rank(), count, salt);
          std::vector<unsigned char> out(input.size() + 1, 0xAB);  // +1: overrun sentinel
          if (in_place) {
            std::memcpy(out.data(), input.data(), input.size());
            comm.allreduce(out.data(), count, t, op);
          } else {
            comm.allreduce(input.data(), out.data(), count, t, op);
            EXPECT_EQ(input, make_input(t, op, comm.rank(), count, salt))
                << "input modified: " << label(t, op, count, in_place);
          }
          EXPECT_EQ(count_wrong(out.data(), t, op, comm.size(), count, salt), 0u)
              << label(t, op, count, in_place) << " on rank " << comm.rank();
          EXPECT_EQ(out.back(), 0xAB) << "wrote past the end: " << label(t, op, count, in_place);
        }
      }
    }
  }
}

}  // namespace arcoll::testing
