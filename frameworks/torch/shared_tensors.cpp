#include "frameworks/torch/shared_tensors.hpp"

#include <ATen/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "arcoll/memory.hpp"
#include "src/base/shared_memory.hpp"

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

// Freed shared tensors, kept for the next ones: torch frees and makes tensors of the same
// sizes every step (activations, gradients), and a new region costs system calls, page faults
// and a new mapping at each peer that reads it (a small CNN's DDP step took twice as long with
// every tensor from 64 KiB in a new region). A tensor takes a kept region of its size up to
// twice it; beyond kKeptBytes regions go back to arcoll.
class KeptRegions {
 public:
  static constexpr std::size_t kKeptBytes = std::size_t{512} << 20;

  void* take(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = kept_.lower_bound(bytes);
    if (it == kept_.end() || it->first > 2 * bytes) return nullptr;
    void* pointer = it->second;
    kept_bytes_ -= it->first;
    kept_.erase(it);
    return pointer;
  }
  void keep(void* pointer, std::size_t region_bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (kept_bytes_ + region_bytes <= kKeptBytes) {
        kept_.emplace(region_bytes, pointer);
        kept_bytes_ += region_bytes;
        return;
      }
    }
    arcoll::mem_free(pointer);
  }
  void release_all() {
    std::multimap<std::size_t, void*> kept;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      kept.swap(kept_);
      kept_bytes_ = 0;
    }
    for (const auto& entry : kept) arcoll::mem_free(entry.second);
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> kept_;  // by region size
  std::size_t kept_bytes_ = 0;
};
// Never destroyed: tensors may be freed after static destructors ran.
KeptRegions* const kept = new KeptRegions;

// torch frees some allocations through the allocator's raw deleter, one for all: the shared
// ones are kept for reuse, the others go back to the allocator they came from.
c10::DeleterFnPtr fallback_deleter = nullptr;

void release(void* pointer) {
  if (pointer == nullptr) return fallback_deleter(pointer);
  if (const auto region = shared_memory::find(pointer, 1))
    kept->keep(pointer, region->bytes);
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
    void* memory = kept->take(bytes);
    if (memory == nullptr) memory = arcoll::mem_alloc(bytes);
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
  if (min_bytes == 0) kept->release_all();
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
