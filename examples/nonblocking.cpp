// Non-blocking collectives: start the all-reduce of one gradient bucket, go on computing the
// next while it runs, and wait for all of them at the end (what DDP does with its buckets).
//
//   ARCOLL_RANK=0 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_nonblocking &
//   ARCOLL_RANK=1 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_nonblocking
//
// (or any launcher: mpirun, srun, torchrun; see allreduce.cpp).
#include <arcoll/communicator.hpp>
#include <arcoll/error.hpp>
#include <arcoll/work.hpp>

#include <atomic>
#include <cstdio>
#include <future>
#include <vector>

int main() {
  try {
    auto comm = arcoll::Communicator::from_env();
    const int rank = comm->rank(), size = comm->size();
    constexpr int kBuckets = 4;
    constexpr std::size_t kCount = 100'000;

    // Buffers of a call in flight belong to it until it completes: one per bucket.
    std::vector<std::vector<float>> buckets(kBuckets, std::vector<float>(kCount));
    std::vector<arcoll::WorkPtr> works;
    // Callbacks may run after wait() has returned: what they do is awaited through them.
    std::atomic<int> completed{0};
    std::promise<void> every_callback_ran;
    for (int b = 0; b < kBuckets; ++b) {
      // "Compute" the bucket's gradients: rank r gives r + b everywhere.
      for (float& g : buckets[b]) g = static_cast<float>(rank + b);
      // Starts at once and runs on the communicator's progress thread, in issue order.
      works.push_back(comm->iallreduce(buckets[b].data(), buckets[b].data(), kCount,
                                       arcoll::DataType::f32, arcoll::ReduceOp::avg));
      // A callback runs on the thread that completes the call; it must not call `comm`.
      works.back()->on_completion([&](const arcoll::Work& w) {
        if (!w.exception() && ++completed == kBuckets) every_callback_ran.set_value();
      });
    }
    // test() never blocks: the caller may poll between steps of its own work.
    int done_early = 0;
    for (const auto& w : works) done_early += w->test() ? 1 : 0;

    // wait() throws the call's error (an arcoll::Error naming the call and the rank).
    for (const auto& w : works) w->wait();
    every_callback_ran.get_future().wait();

    // The average of r + b over ranks r = 0 .. size-1 is (size - 1) / 2 + b.
    bool right = true;
    for (int b = 0; b < kBuckets; ++b)
      for (float g : buckets[b])
        right = right && g == static_cast<float>(size - 1) / 2 + static_cast<float>(b);
    if (rank == 0)
      std::printf("nonblocking: %s: %d buckets averaged over %d ranks (%d done before waiting)\n",
                  right ? "ok" : "WRONG", kBuckets, size, done_early);
    return right ? 0 : 1;
  } catch (const arcoll::Error& e) {
    std::fprintf(stderr, "arcoll error: %s\n", e.what());
    return 1;
  }
}
