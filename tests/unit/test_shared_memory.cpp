// The table of shared allocations that the shm transport consults: what lies in a region,
// what does not, and what may be given back.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "arcoll/error.hpp"
#include "src/base/shared_memory.hpp"

namespace arcoll::shared_memory {
namespace {

TEST(SharedMemory, RegionsAreFoundByAnyRangeWithinThem) {
  constexpr std::size_t kBytes = 10000;  // rounded up to whole pages
  auto* a = static_cast<char*>(allocate(kBytes));
  auto* b = static_cast<char*>(allocate(kBytes));
  std::memset(a, 1, kBytes);  // writable, and zero-filled before
  EXPECT_EQ(b[kBytes - 1], 0);
  const auto found = find(a + 100, 50);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->base, a);
  EXPECT_GE(found->bytes, kBytes);
  EXPECT_GE(found->fd, 0);
  ASSERT_TRUE(find(b, kBytes).has_value());
  EXPECT_NE(find(b, kBytes)->id, found->id);
  EXPECT_FALSE(find(a + found->bytes - 8, 16).has_value());  // runs past the end
  int on_the_stack = 0;
  EXPECT_FALSE(find(&on_the_stack, sizeof on_the_stack).has_value());
  EXPECT_THROW(release(a + 1), InvalidArgument);
  release(a);
  EXPECT_FALSE(find(a + 100, 50).has_value());
  EXPECT_THROW(release(a), InvalidArgument);  // twice
  release(b);
  release(nullptr);
  // Ids are never reused, even where an address is.
  auto* c = static_cast<char*>(allocate(kBytes));
  EXPECT_GT(find(c, 1)->id, found->id);
  release(c);
  void* page = allocate(0);  // one page
  EXPECT_TRUE(find(page, 1).has_value());
  release(page);
}

}  // namespace
}  // namespace arcoll::shared_memory
