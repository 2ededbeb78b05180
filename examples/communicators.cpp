// Communicators of their own: split() groups ranks by a color (as MPI_Comm_split), duplicate()
// gives a library or a thread calls that never meet the caller's (as MPI_Comm_dup). Run it on
// 3 ranks: ranks 0 and 2 (even) form one group, rank 1 another.
//
//   for r in 0 1 2; do
//     ARCOLL_RANK=$r ARCOLL_WORLD_SIZE=3 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_communicators &
//     done; wait
#include <arcoll/communicator.hpp>
#include <arcoll/error.hpp>

#include <cstdio>
#include <thread>

int main() {
  try {
    auto world = arcoll::Communicator::from_env();
    const int rank = world->rank(), size = world->size();

    // Collective: every rank calls split(), between the same calls. Ranks keep the world's
    // order within their group; a negative color would join none (and get null).
    auto parity = world->split(rank % 2);
    int sum = rank;
    parity->allreduce(&sum, 1, arcoll::DataType::i32, arcoll::ReduceOp::sum);
    int expected = 0;  // the sum of the world ranks of this rank's parity
    for (int r = rank % 2; r < size; r += 2) expected += r;
    bool right = sum == expected && parity->rank() == rank / 2;

    // A duplicate used by another thread while this one calls the world: their messages never
    // mix, whatever order the two threads run in.
    auto side = world->duplicate();
    int from_thread = 1;
    std::thread helper(
        [&] { side->allreduce(&from_thread, 1, arcoll::DataType::i32, arcoll::ReduceOp::sum); });
    int from_main = 10;
    world->allreduce(&from_main, 1, arcoll::DataType::i32, arcoll::ReduceOp::sum);
    helper.join();
    right = right && from_thread == size && from_main == 10 * size;

    int wrong = right ? 0 : 1;
    world->allreduce(&wrong, 1, arcoll::DataType::i32, arcoll::ReduceOp::sum);
    if (rank == 0)
      std::printf("communicators: %s: %d ranks, group of the even ranks has %d\n",
                  wrong == 0 ? "ok" : "WRONG", size, parity->size());
    return wrong == 0 ? 0 : 1;
  } catch (const arcoll::Error& e) {
    std::fprintf(stderr, "arcoll error: %s\n", e.what());
    return 1;
  }
}
