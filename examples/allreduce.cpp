// All-reduce a vector of floats across every rank of a job.
//
// The communicator learns its rank, the world size and the rendezvous address from whichever
// launcher started the process, so the same binary runs under any of them:
//
//   mpirun -np 2 ./example_allreduce                   (needs ARCOLL_MASTER_ADDR unless arcoll
//                                                       was built with MPI)
//   torchrun --nproc_per_node 2 --no_python --redirects 1 --tee 1 ./example_allreduce
//   ARCOLL_RANK=0 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_allreduce &
//   ARCOLL_RANK=1 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_allreduce
//
// Started on its own it is a world of one. ARCOLL_TIMEOUT (seconds) bounds every wait.
#include <arcoll/communicator.hpp>
#include <arcoll/error.hpp>

#include <cstdio>
#include <vector>

int main() {
  try {
    // Joins the job: blocks until every rank has arrived (or the timeout expires).
    auto comm = arcoll::Communicator::from_env();
    const int rank = comm->rank();
    const int size = comm->size();

    // Rank r contributes r + i at index i.
    std::vector<float> values(8);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(rank + i);

    // In place: afterwards every rank holds the element-wise sum over all ranks.
    comm->allreduce(values.data(), values.size(), arcoll::DataType::f32, arcoll::ReduceOp::sum);

    if (rank == 0) {
      std::printf("sum over %d ranks (transport %s, algorithm %s):", size,
                  comm->transport_name().c_str(), comm->algorithm_name().c_str());
      for (float v : values) std::printf(" %g", v);
      std::printf("\n");
    }
    return 0;
  } catch (const arcoll::Error& e) {
    // Every failure says what failed, on which rank, and with which peer.
    std::fprintf(stderr, "arcoll error: %s\n", e.what());
    return 1;
  }
}
