// Shared buffers: memory from arcoll::mem_alloc, which the ranks of a host read from each
// other in place (as MPI_Alloc_mem or ncclMemAlloc give): a large all-reduce from it skips the
// copy through the shared-memory rings. Any call takes such buffers and ordinary ones alike.
//
//   ARCOLL_RANK=0 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_shared_buffers &
//   ARCOLL_RANK=1 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_shared_buffers
#include <arcoll/communicator.hpp>
#include <arcoll/error.hpp>
#include <arcoll/memory.hpp>

#include <chrono>
#include <cstdio>
#include <memory>

int main() {
  try {
    auto comm = arcoll::Communicator::from_env();
    const int rank = comm->rank(), size = comm->size();
    constexpr std::size_t kCount = 16u << 20;  // 64 MB of f32

    // Zero-filled and page-aligned; give it back with mem_free (a unique_ptr does it here).
    std::unique_ptr<float, void (*)(void*)> shared(
        static_cast<float*>(arcoll::mem_alloc(kCount * sizeof(float))), arcoll::mem_free);
    std::unique_ptr<float[]> heap(new float[kCount]);

    // The same all-reduce from each kind of buffer; the first round of each is a warm-up.
    auto time_allreduce = [&](float* buffer) {
      double seconds = 0;
      for (int round = 0; round < 3; ++round) {
        for (std::size_t i = 0; i < kCount; ++i) buffer[i] = static_cast<float>(rank);
        comm->barrier();
        const auto start = std::chrono::steady_clock::now();
        comm->allreduce(buffer, kCount, arcoll::DataType::f32, arcoll::ReduceOp::sum);
        if (round > 0)
          seconds +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      return seconds / 2;
    };
    const double from_shared = time_allreduce(shared.get());
    const double from_heap = time_allreduce(heap.get());

    // Both hold the sum of the ranks, 0 + 1 + ... + (size - 1).
    const float expected = static_cast<float>(size * (size - 1) / 2);
    int wrong = 0;
    for (std::size_t i = 0; i < kCount; ++i)
      wrong += (shared.get()[i] != expected) + (heap[i] != expected);
    comm->allreduce(&wrong, 1, arcoll::DataType::i32, arcoll::ReduceOp::sum);
    if (rank == 0)
      std::printf(
          "shared_buffers: %s: 64 MB all-reduce on %d ranks, %.1f ms from mem_alloc, "
          "%.1f ms from the heap\n",
          wrong == 0 ? "ok" : "WRONG", size, from_shared * 1e3, from_heap * 1e3);
    return wrong == 0 ? 0 : 1;
  } catch (const arcoll::Error& e) {
    std::fprintf(stderr, "arcoll error: %s\n", e.what());
    return 1;
  }
}
