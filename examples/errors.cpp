// Errors: every failure is an arcoll::Error that says what failed, on which rank, with which
// peer; a call never waits past its deadline. Shown on communicators of their own, so that
// the world communicator carries on after each:
//   1. an abort: rank 0 gives up, and every other rank's call fails at once, naming it;
//   2. a deadline: rank 0 comes late, and the others' call fails after 1 s instead of waiting.
//
//   ARCOLL_RANK=0 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_errors &
//   ARCOLL_RANK=1 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_errors
#include <arcoll/communicator.hpp>
#include <arcoll/error.hpp>

#include <chrono>
#include <cstdio>
#include <string>

using namespace std::chrono_literals;

// Runs `call`; the code of the arcoll::Error it threw (printed with its message), or ok.
template <typename Call>
arcoll::ErrorCode caught(const char* what, Call call) {
  try {
    call();
    return arcoll::ErrorCode::ok;
  } catch (const arcoll::Error& e) {
    // e.code(), e.operation(), e.rank() and e.peer() for programs; e.what() for people.
    std::printf("%s: caught %s error: %s\n", what, std::string(arcoll::to_string(e.code())).c_str(),
                e.what());
    return e.code();
  }
}

int main() {
  try {
    auto world = arcoll::Communicator::from_env();
    const int rank = world->rank(), size = world->size();
    if (size < 2) {
      std::printf("errors: run it on 2 ranks or more\n");
      return 0;
    }
    bool right = true;
    float data[4] = {1, 2, 3, 4};

    // 1. An abort, from the rank that gives up (a watchdog thread may call it too).
    auto doomed = world->duplicate();
    if (rank == 0) doomed->abort("rank 0 found its input corrupt");
    const auto abort_code = caught(
        "abort", [&] { doomed->allreduce(data, 4, arcoll::DataType::f32, arcoll::ReduceOp::sum); });
    right = right && abort_code == arcoll::ErrorCode::peer_failure;

    // 2. A deadline: each call waits at most this long for the others (ARCOLL_TIMEOUT sets it
    // for the whole job; set_timeout per communicator, here 1 s).
    auto late = world->duplicate();
    late->set_timeout(1s);
    // Rank 0 is busy elsewhere (here: on the world communicator, until the others are done
    // waiting for it) and comes late; the others time out, and rank 0 finds they gave up.
    if (rank == 0) world->barrier();
    const auto deadline_code = caught("deadline", [&] { late->barrier(); });
    if (rank != 0) world->barrier();
    right = right && deadline_code ==
                         (rank == 0 ? arcoll::ErrorCode::peer_failure : arcoll::ErrorCode::timeout);

    // The world communicator was never part of either failure.
    int wrong = right ? 0 : 1;
    world->allreduce(&wrong, 1, arcoll::DataType::i32, arcoll::ReduceOp::sum);
    if (rank == 0) std::printf("errors: %s on %d ranks\n", wrong == 0 ? "ok" : "WRONG", size);
    return wrong == 0 ? 0 : 1;
  } catch (const arcoll::Error& e) {
    std::fprintf(stderr, "arcoll error: %s\n", e.what());
    return 1;
  }
}
