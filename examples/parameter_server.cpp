// The parameter server: workers push gradients and pull the sum, by key (as BytePS and
// ps-lite do), first with a server thread in every rank (colocated), then with the job's last
// rank only serving (dedicated). Run it on 3 ranks to see both shapes:
//
//   for r in 0 1 2; do
//     ARCOLL_RANK=$r ARCOLL_WORLD_SIZE=3 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_parameter_server &
//     done; wait
#include <arcoll/communicator.hpp>
#include <arcoll/error.hpp>
#include <arcoll/parameter_server.hpp>

#include <cstdio>
#include <vector>

// Every worker pushes (worker index + step) for `steps` steps and pulls after each; under bsp
// a pull returns the sum of that step's pushes. True when every pull was right.
bool train(arcoll::ParameterServer& ps, int steps) {
  constexpr std::uint64_t kKey = 7;
  constexpr std::size_t kCount = 3'000'000;  // 12 MB: cut into pieces over the servers
  ps.register_tensor(kKey, kCount, arcoll::DataType::f32);
  const int workers = ps.worker_count();
  std::vector<float> gradient(kCount), sum(kCount);
  bool right = true;
  for (int step = 0; step < steps; ++step) {
    for (float& g : gradient) g = static_cast<float>(ps.worker_index() + step);
    ps.push_pull(kKey, gradient.data(), sum.data());  // push, then pull the step's sum
    const float expected = static_cast<float>(workers * (workers - 1) / 2 + workers * step);
    for (float s : sum) right = right && s == expected;
  }
  ps.finish();  // dedicated servers stop once every worker has finished
  return right;
}

int main() {
  try {
    auto comm = arcoll::Communicator::from_env();
    const int rank = comm->rank(), size = comm->size();
    bool right = true;

    {  // Colocated: every rank works and serves a share of the pieces.
      arcoll::ParameterServer ps(*comm, {});  // bsp, summing, 4 MiB pieces
      right = train(ps, 3) && right;
      if (rank == 0)
        std::printf("colocated: %d workers, key 7 served in %zu pieces\n", ps.worker_count(),
                    ps.pieces(7).size());
    }

    if (size > 1) {  // Dedicated: the last rank only serves; the others work.
      arcoll::ParameterServerOptions options;
      options.server_ranks = {size - 1};
      arcoll::ParameterServer ps(*comm, options);
      if (ps.is_worker())
        right = train(ps, 3) && right;
      else
        ps.serve();  // until every worker has finished
      if (rank == 0)
        std::printf("dedicated: %d workers, server rank %d\n", ps.worker_count(), size - 1);
    }

    // Every rank's verdict reaches rank 0.
    int wrong = right ? 0 : 1;
    comm->allreduce(&wrong, 1, arcoll::DataType::i32, arcoll::ReduceOp::sum);
    if (rank == 0)
      std::printf("parameter_server: %s on %d ranks\n", wrong == 0 ? "ok" : "WRONG", size);
    return wrong == 0 ? 0 : 1;
  } catch (const arcoll::Error& e) {
    std::fprintf(stderr, "arcoll error: %s\n", e.what());
    return 1;
  }
}
