#include "frameworks/torch/shared_tensors.hpp"

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "arcoll/memory.hpp"
#include "base/shared_memory.hpp"

namespace arcoll::torch_backend {
namespace {

// torch 2.x made allocate() non-const and asks every allocator for copy_data().
#if TORCH_VERSION_MAJOR >= 2
#define ARCOLL_ALLOCATE_CONST
#else
#define ARCOLL_ALLOCATE_CONST const
#endif

// Above every allocator torch registers by default (priority 0), so that ours is the one in
// force, and so that setting torch's back (the same priority) is allowed.
constexpr std::uint8_t kPriority = 1;

// torch frees some allocations through the allocator's raw deleter, one for all: the shared
// ones go back to arcoll, the others to the allocator they came from.
c10::DeleterFnPtr fallback_deleter = nullptr;

void release(void* pointer) {
  if (pointer != nullptr && shared_memory::find(pointer, 1))
    arcoll::mem_free(pointer);
  else
    fallback_deleter(pointer);
}

class SharedTensorAllocator final : public c10::Allocator {
 public:
  explicit SharedTensorAllocator(c10::Allocator* fallback) : fallback_(fallback) {
    fallback_deleter = fallback->raw_deleter();
  }

  c10::DataPtr allocate(std::size_t bytes) ARCOLL_ALLOCATE_CONST override {
    if (bytes == 0 || bytes < min_bytes.load(std::memory_order_relaxed))
      return fallback_->allocate(bytes);
    void* memory = arcoll::mem_alloc(bytes);
    return {memory, memory, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return fallback_deleter != nullptr ? &release : nullptr;
  }
#if TORCH_VERSION_MAJOR >= 2
  void copy_data(void* destination, const void* source, std::size_t bytes) const override {
    std::memcpy(destination, source, bytes);
  }
#endif

  c10::Allocator* fallback() const { return fallback_; }
  std::atomic<std::size_t> min_bytes{0};

 private:
  c10::Allocator* fallback_;
};

std::mutex installing;
SharedTensorAllocator* installed = nullptr;  // never freed: tensors it made may outlive anything

}  // namespace

void share_cpu_tensors(std::size_t min_bytes) {
  std::lock_guard<std::mutex> lock(installing);
  if (installed == nullptr) {
    if (min_bytes == 0) return;
    installed = new SharedTensorAllocator(c10::GetCPUAllocator());
  }
  installed->min_bytes.store(min_bytes, std::memory_order_relaxed);
  c10::SetCPUAllocator(min_bytes == 0 ? installed->fallback() : installed, kPriority);
}

std::size_t shared_cpu_tensor_bytes() {
  std::lock_guard<std::mutex> lock(installing);
  return installed == nullptr ? 0 : installed->min_bytes.load(std::memory_order_relaxed);
}

bool is_shared(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_cpu() || !tensor.has_storage()) return false;
  const auto& storage = tensor.storage();
  return storage.data() != nullptr &&
         shared_memory::find(storage.data(), storage.nbytes()).has_value();
}

}  // namespace arcoll::torch_backend
