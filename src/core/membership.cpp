// Communicators made from others: a duplicate or a split of the same ranks, the survivors of a
// failure (shrink), and a group with newcomers appended (grow, join). Each new communicator
// meets at a store that listened before its address went out, on the lowest rank that keeps
// its place, with the job's token.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "src/base/auth.hpp"
#include "src/base/log.hpp"
#include "src/base/socket.hpp"
#include "src/core/calls.hpp"

namespace arcoll {

using Impl = Communicator::Impl;

std::unique_ptr<Communicator> Communicator::duplicate() {
  return split(0, impl_->options_);
}

std::unique_ptr<Communicator> Communicator::duplicate(const Options& options) {
  return split(0, options);
}

std::unique_ptr<Communicator> Communicator::split(int color) {
  return split(color, impl_->options_);
}

std::unique_ptr<Communicator> Communicator::split(int color, const Options& options) {
  const int n = size();
  std::vector<std::int32_t> colors(static_cast<std::size_t>(n));
  const std::int32_t mine = color < 0 ? -1 : color;
  allgather(&mine, colors.data(), 1, DataType::i32);
  LaunchInfo launch;
  launch.source = "split";
  launch.rank = 0;
  launch.world_size = 0;
  int leader = -1;
  for (int r = 0; r < n; ++r) {
    if (colors[static_cast<std::size_t>(r)] != mine) continue;
    if (leader < 0) leader = r;
    if (r < rank()) ++launch.rank;
    ++launch.world_size;
  }
  launch.world_size = std::max(launch.world_size, 1);
  // Each group meets at a new store on its lowest rank, which listens where its transports do,
  // on a port the kernel picks; the address and a fresh token travel through this communicator.
  constexpr std::size_t kAddress = 256;
  std::vector<char> own(kAddress, '\0'), all(kAddress * static_cast<std::size_t>(n), '\0');
  const Rendezvous& here = impl_->rendezvous_;
  if (mine >= 0 && leader == rank() && launch.world_size > 1) {
    net::Fd listener = net::listen_on(here.listen_address, 0);
    std::snprintf(own.data(), own.size(), "%s %d %s", here.listen_address.c_str(),
                  net::local_endpoint(listener.get()).port, auth::new_token().c_str());
    launch.store_listen_fd = listener.release();
  }
  allgather(own.data(), all.data(), kAddress, DataType::u8);
  if (mine < 0) return nullptr;
  if (launch.world_size > 1) {
    const char* address = all.data() + static_cast<std::size_t>(leader) * kAddress;
    char host[200] = {}, token[128] = {};
    if (std::sscanf(address, "%199s %d %127s", host, &launch.master_port, token) != 3)
      throw ProtocolError("split", "rank " + std::to_string(leader) + " sent a malformed address",
                          rank());
    launch.master_addr = host;
    launch.job_token = token;
  }
  return std::make_unique<Communicator>(launch, options);
}

std::unique_ptr<Communicator> Communicator::shrink() {
  Impl& impl = *impl_;
  impl.break_for_shrink();
  if (size() == 1) return std::make_unique<Communicator>(LaunchInfo{}, impl.options_);
  // A rank that dies after its proposal reached the others may be decided a member; building
  // the communicator then fails, and the live ranks agree again (each time one rank fewer).
  for (int attempt = 1;; ++attempt) {
    // Each rank offers a store, listening before its address goes out: the lowest member's
    // serves the new communicator's rendezvous. Its call settings go with it, and every member
    // takes the lowest member's: survivors that failed different calls of this communicator
    // may hold different ones (a set_algorithm() between those calls), and the new
    // communicator's first call must not run two algorithms.
    net::Fd store = net::listen_on(impl.rendezvous_.listen_address, 0);
    const Options& own = impl.options_;
    const std::string offer = impl.rendezvous_.listen_address + " " +
                              std::to_string(net::local_endpoint(store.get()).port) + " " +
                              std::to_string(static_cast<int>(own.wire)) + " " +
                              (own.wire_error_feedback ? "1 " : "0 ") + own.algorithm;
    const Survivors::Decision decision =
        impl.survivors_.agree(offer, net::Clock::now() + impl.options_.timeout);
    LaunchInfo launch;
    launch.source = "shrink";
    launch.world_size = static_cast<int>(decision.members.size());
    launch.rank =
        static_cast<int>(std::find(decision.members.begin(), decision.members.end(), rank()) -
                         decision.members.begin());
    launch.job_token = impl.rendezvous_.job_token;
    launch.store_listening = true;
    std::istringstream lead(decision.offers.at(decision.members.front()));
    int wire = 0, error_feedback = 0;
    Options options = own;
    lead >> launch.master_addr >> launch.master_port >> wire >> error_feedback >> options.algorithm;
    options.wire = static_cast<DataType>(wire);
    options.wire_error_feedback = error_feedback != 0;
    // A member that dies now never joins: the first rank to see its agreement connection close
    // says so in the new store, and every rank waiting for it fails at once. Where the store's
    // own rank died, each rank ends its own waits on the store: another process may come to
    // listen at its port (or a connection to it connect to itself) and never answer.
    net::Fd store_gone(::eventfd(0, EFD_CLOEXEC));
    if (!store_gone)
      throw SystemError("shrink", "eventfd(): " + std::string(std::strerror(errno)), rank());
    launch.store_gone_fd = store_gone.get();
    if (launch.rank == 0) launch.store_listen_fd = store.release();
    std::atomic<bool> built{false};
    std::thread watchdog([&] {
      while (!built.load()) {
        const int dead = impl.survivors_.first_closed(
            decision.members, net::Clock::now() + std::chrono::milliseconds(50));
        if (dead < 0) continue;
        const auto index = std::find(decision.members.begin(), decision.members.end(), dead) -
                           decision.members.begin();
        if (index == 0) {
          const std::uint64_t one = 1;
          (void)!::write(store_gone.get(), &one, sizeof one);
          return;
        }
        try {
          StoreClient store_client({launch.master_addr, launch.master_port},
                                   net::Clock::now() + std::chrono::seconds(1), rank(),
                                   launch.job_token, false);
          mark_failed_to_join(store_client, static_cast<int>(index),
                              "rank " + std::to_string(dead) +
                                  " of the communicator shrunk died after the agreement");
        } catch (const Error&) {
        }
        return;
      }
    });
    struct JoinOnExit {
      std::atomic<bool>& built;
      std::thread& watchdog;
      ~JoinOnExit() {
        built = true;
        watchdog.join();
      }
    } join_on_exit{built, watchdog};
    try {
      return std::make_unique<Communicator>(launch, options);
    } catch (const Error& e) {
      if (attempt >= size() || e.code() == ErrorCode::invalid_argument ||
          e.code() == ErrorCode::configuration)
        throw;
      log::warn("rank " + std::to_string(rank()) + ": the survivors' communicator of " +
                std::to_string(launch.world_size) + " ranks could not be built (" + e.what() +
                "); agreeing again");
    }
  }
}

const std::string& Communicator::job_token() const {
  return impl_->rendezvous_.job_token;
}

std::string Communicator::rendezvous_address() const {
  const Rendezvous& r = impl_->rendezvous_;
  if (r.server) return r.listen_address + ":" + std::to_string(r.server->endpoint().port);
  return r.store ? r.store->endpoint().str() : "";
}

namespace {

// Newcomers take tickets in the store of the group they join, in the order they come; a grow()
// admits the tickets after those admitted before, telling each its place at this key.
const std::string kTicketsKey = "grow/tickets";
std::string admission_key(std::int64_t ticket) {
  return "grow/admitted/" + std::to_string(ticket);
}

}  // namespace

std::unique_ptr<Communicator> Communicator::grow(int wait_for) {
  Impl& impl = *impl_;
  const char* operation = "grow";
  if (wait_for < 0)
    throw InvalidArgument(operation, "cannot wait for " + std::to_string(wait_for) + " newcomers",
                          rank());
  if (size() == 1)
    throw ConfigurationError(operation,
                             "a communicator of one rank has no rendezvous store for newcomers "
                             "to come to",
                             rank());
  // Rank 0 counts the newcomers and tells the members: they agree on the new size before any
  // collective of it runs. -1: fewer came than awaited.
  std::int64_t newcomers = 0;
  if (rank() == 0) {
    const auto deadline = net::Clock::now() + impl.options_.timeout;
    for (;;) {
      newcomers = impl.rendezvous_.store->add(kTicketsKey, 0) - impl.admitted_;
      if (newcomers >= wait_for) break;
      if (net::Clock::now() >= deadline) {
        newcomers = -1 - newcomers;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // The members wait for rank 0's count while it waits for the newcomers: a timeout more.
  const std::chrono::milliseconds timeout = impl.options_.timeout;
  impl.set_timeout(2 * timeout);
  try {
    broadcast(&newcomers, 1, DataType::i64, 0);
  } catch (const Error&) {
    impl.set_timeout(timeout);
    throw;
  }
  impl.set_timeout(timeout);
  if (newcomers < 0)
    throw TimeoutError(operation,
                       std::to_string(-1 - newcomers) + " of the " + std::to_string(wait_for) +
                           " awaited newcomers came to " + rendezvous_address() +
                           " within the timeout",
                       rank());
  // The new store listens on rank 0 before its address goes out, to the members through this
  // communicator and to the newcomers through this one's store.
  constexpr std::size_t kAddress = 128;
  char address[kAddress] = {};
  LaunchInfo launch;
  launch.source = "grow";
  launch.rank = rank();
  launch.world_size = size() + static_cast<int>(newcomers);
  launch.job_token = impl.rendezvous_.job_token;
  launch.store_listening = true;
  if (rank() == 0) {
    net::Fd listener = net::listen_on(impl.rendezvous_.listen_address, 0);
    std::snprintf(address, sizeof address, "%s %d", impl.rendezvous_.listen_address.c_str(),
                  net::local_endpoint(listener.get()).port);
    launch.store_listen_fd = listener.release();
    for (std::int64_t i = 1; i <= newcomers; ++i)
      impl.rendezvous_.store->set(
          admission_key(impl.admitted_ + i),
          std::to_string(size() + i - 1) + " " + std::to_string(launch.world_size) + " " + address);
  }
  impl.admitted_ += newcomers;
  broadcast(address, kAddress, DataType::u8, 0);
  char host[kAddress] = {};
  if (std::sscanf(address, "%127s %d", host, &launch.master_port) != 2)
    throw ProtocolError(operation, "rank 0 sent a malformed address", rank(), 0);
  launch.master_addr = host;
  return std::make_unique<Communicator>(launch, impl.options_);
}

std::unique_ptr<Communicator> Communicator::join(const std::string& rendezvous_address,
                                                 const std::string& job_token,
                                                 const Options& options) {
  const char* operation = "join";
  net::Endpoint group;
  if (!net::parse_endpoint(rendezvous_address, group))
    throw InvalidArgument(operation,
                          "'" + rendezvous_address + "' is not an address:port of a group");
  const auto deadline = net::Clock::now() + options.timeout;
  StoreClient store(group, deadline, Error::kNoRank, job_token);
  const std::int64_t ticket = store.add(kTicketsKey, 1);
  const auto admission = store.get(admission_key(ticket), deadline);
  if (!admission)
    throw TimeoutError(operation, "no grow() of the group at " + rendezvous_address +
                                      " admitted this process within the timeout (" +
                                      std::to_string(options.timeout.count()) + " ms)");
  LaunchInfo launch;
  launch.source = "join";
  launch.job_token = job_token;
  launch.store_listening = true;
  char host[128] = {};
  if (std::sscanf(admission->c_str(), "%d %d %127s %d", &launch.rank, &launch.world_size, host,
                  &launch.master_port) != 4)
    throw ProtocolError(operation, "the group's store sent a malformed admission: " + *admission);
  launch.master_addr = host;
  return std::make_unique<Communicator>(launch, options);
}

}  // namespace arcoll
