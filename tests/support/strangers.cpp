#include "tests/support/strangers.hpp"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "arcoll/communicator.hpp"
#include "src/base/auth.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {

using Clock = std::chrono::steady_clock;

bool poke(const net::Endpoint& endpoint, const std::string& bytes) {
  std::string why;
  net::Fd fd = net::connect_until(endpoint, Clock::now() + std::chrono::seconds(2), why);
  if (!fd) return false;
  ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return true;
}

void send_garbage(const net::Endpoint& endpoint, std::mt19937& rng,
                  const std::vector<std::string>& magics) {
  auto random_bytes = [&](std::size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  for (int round = 0; round < 5; ++round) poke(endpoint, random_bytes(1 + rng() % 8192));
  poke(endpoint, std::string(3, 'x'));  // a truncated header, then silence
  for (const std::string& magic : magics) {
    std::string message = random_bytes(64);
    std::memcpy(message.data(), magic.data(), 4);
    poke(endpoint, message);
  }
}

void handshake_as_stranger(const net::Endpoint& endpoint, const std::string& token,
                           const std::string& purpose, std::string_view said) {
  std::string why;
  net::Fd fd = net::connect_until(endpoint, Clock::now() + std::chrono::seconds(1), why);
  auth::Challenge challenge{};
  if (!fd || !net::read_all(fd.get(), &challenge, sizeof challenge,
                            Clock::now() + std::chrono::seconds(1), "stranger"))
    return;
  const auth::Mac mac = auth::answer(token, purpose, challenge, said);
  std::string bytes(said);
  bytes.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::vector<RankExit> job_beside_stranger(
    const std::function<void(StoreClient& store, const net::Endpoint& store_address,
                             std::mt19937& rng)>& stranger) {
  LocalLaunchOptions options;
  options.ranks = 3;
  options.env = {{"ARCOLL_TIMEOUT", "20"}};
  return launch(options, [&] {
    auto comm = Communicator::from_env();
    std::atomic<bool> stranger_done{comm->rank() != 1};
    std::thread thread;
    if (comm->rank() == 1) {
      thread = std::thread([&] {
        std::mt19937 rng(42);
        const net::Endpoint store{std::getenv("ARCOLL_MASTER_ADDR"),
                                  std::atoi(std::getenv("ARCOLL_MASTER_PORT"))};
        // The stranger thread lives in a rank: it reads the addresses as a rank would.
        StoreClient reader(store, Clock::now() + std::chrono::seconds(5), 1,
                           std::getenv("ARCOLL_JOB_TOKEN"));
        stranger(reader, store, rng);
        stranger_done = true;
      });
    }
    std::size_t wrong = 0;
    int after = 0;
    for (int i = 0; after < 20; ++i) {
      std::int32_t done = stranger_done ? 1 : 0;
      comm->allreduce(&done, 1, DataType::i32, ReduceOp::min);
      if (done == 1) ++after;
      const std::size_t count = 1 + static_cast<std::size_t>(i % 300) * 37;
      auto data = make_input(DataType::f32, ReduceOp::sum, comm->rank(), count,
                             static_cast<std::size_t>(i));
      comm->allreduce(data.data(), count, DataType::f32, ReduceOp::sum);
      wrong += count_wrong(data.data(), DataType::f32, ReduceOp::sum, comm->size(), count,
                           static_cast<std::size_t>(i));
    }
    if (thread.joinable()) thread.join();
    comm->barrier();
    std::printf("wrong elements: %zu\n", wrong);
    return wrong == 0 ? 0 : 5;
  });
}

}  // namespace arcoll::testing
