#include "arcoll/memory.hpp"

#include "src/base/shared_memory.hpp"

namespace arcoll {

void* mem_alloc(std::size_t bytes) {
  return shared_memory::allocate(bytes);
}

void mem_free(void* pointer) {
  shared_memory::release(pointer);
}

}  // namespace arcoll
