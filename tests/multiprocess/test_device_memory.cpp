// Calls on device memory (staged through host copies, src/core/device_staging.hpp; sends and
// receives over shm read from the peer's device, as CUDA IPC reads them), on the emulated
// device of tests/support/emulated_device.hpp: a rank that reads or writes a device buffer with
// the host crashes. All-reduce is checked against the double-precision reference; every other
// call against the same call on host buffers, whose own tests check it against the reference.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "arcoll/error.hpp"
#include "tests/support/emulated_device.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

// Staging is the same over every transport: it runs over shared memory only.
bool skipped_here() {
  return forced_transport().has_value() && *forced_transport() != "shm";
}

class DeviceBuffers : public ::testing::TestWithParam<int> {};

TEST_P(DeviceBuffers, AllreduceMatchesReference) {
  if (skipped_here()) GTEST_SKIP() << "device staging is tested over shm";
  run_ranks(GetParam(), [](Communicator& comm) {
    check_allreduce(comm, 23, Coverage::sampled, Memory::device);
  });
}

// One call of a case on a rank: `send` and `recv` are f32 buffers of the case's sizes (or one
// inside the other, in place), `n` the call's count.
using CallFn = std::function<void(Communicator&, const float* send, float* recv, std::size_t n)>;
struct Case {
  std::string name;
  std::size_t send = 0, recv = 0;  // elements
  CallFn call;
  // In place: send lies in recv at this element, or recv in send.
  std::optional<std::size_t> send_in_recv, recv_in_send;
  bool in_place_only = false;  // a call of one buffer (broadcast, the coalesced all-reduce)
};

// The cases of a rank of `p` ranks for count `n`.
std::vector<Case> cases(int rank, int p, std::size_t n) {
  const auto P = static_cast<std::size_t>(p), r = static_cast<std::size_t>(rank);
  const DataType f32 = DataType::f32;
  // alltoallv: n + j elements to rank j, each block followed by a gap of one element.
  std::vector<std::size_t> send_counts(P), send_offsets(P), recv_counts(P, n + r), recv_offsets(P);
  std::size_t send_extent = 0, recv_extent = 0;
  for (std::size_t j = 0; j < P; ++j) {
    send_counts[j] = n + j;
    send_offsets[j] = send_extent;
    send_extent += send_counts[j] + 1;
    recv_offsets[j] = recv_extent;
    recv_extent += recv_counts[j] + 1;
  }
  const int next = (rank + 1) % p, previous = (rank + p - 1) % p;
  std::vector<Case> all = {
      {"allreduce", n, n,
       [](Communicator& c, const float* s, float* d, std::size_t k) {
         c.allreduce(s, d, k, DataType::f32, ReduceOp::max);
       },
       0, std::nullopt},
      {"reduce_scatter", n * P, n,
       [](Communicator& c, const float* s, float* d, std::size_t k) {
         c.reduce_scatter(s, d, k, DataType::f32, ReduceOp::sum);
       },
       std::nullopt, n * r},
      {"allgather", n, n * P,
       [f32](Communicator& c, const float* s, float* d, std::size_t k) {
         c.allgather(s, d, k, f32);
       },
       n * r, std::nullopt},
      {"broadcast", n, n,
       [p](Communicator& c, const float*, float* d, std::size_t k) {
         c.broadcast(d, k, DataType::f32, 1 % p);
       },
       0, std::nullopt, true},
      {"reduce", n, n,
       [](Communicator& c, const float* s, float* d, std::size_t k) {
         c.reduce(s, d, k, DataType::f32, ReduceOp::sum, 0);
       },
       std::nullopt, std::nullopt},
      {"gather", n, n * P,
       [p](Communicator& c, const float* s, float* d, std::size_t k) {
         c.gather(s, d, k, DataType::f32, p - 1);
       },
       std::nullopt, std::nullopt},
      {"scatter", n * P, n,
       [](Communicator& c, const float* s, float* d, std::size_t k) {
         c.scatter(s, d, k, DataType::f32, 0);
       },
       std::nullopt, std::nullopt},
      {"alltoall", n * P, n * P,
       [](Communicator& c, const float* s, float* d, std::size_t k) {
         c.alltoall(s, d, k, DataType::f32);
       },
       0, std::nullopt},
      {"alltoallv", send_extent, recv_extent,
       [=](Communicator& c, const float* s, float* d, std::size_t) {
         c.alltoallv(s, send_counts, send_offsets, d, recv_counts, recv_offsets, f32);
       },
       std::nullopt, std::nullopt},
      {"allreduce_coalesced", n, n,
       [](Communicator& c, const float*, float* d, std::size_t k) {
         Buffer pieces[] = {{d, k / 2}, {d + k / 2, k - k / 2}};
         c.allreduce_coalesced(pieces, DataType::f32, ReduceOp::sum);
       },
       0, std::nullopt, true},
      {"sendrecv", n, n,
       [next, previous](Communicator& c, const float* s, float* d, std::size_t k) {
         c.sendrecv(s, k * sizeof(float), next, d, k * sizeof(float), previous, 5);
       },
       std::nullopt, std::nullopt},
      {"isend/irecv", n, n,
       [next, previous](Communicator& c, const float* s, float* d, std::size_t k) {
         WorkPtr received = c.irecv(d, k * sizeof(float), previous, 6);
         WorkPtr sent = c.isend(s, k * sizeof(float), next, 6);
         sent->wait();
         received->wait();
       },
       std::nullopt, std::nullopt},
  };
  if (p == 1) all.resize(all.size() - 2);  // no peer to send to
  return all;
}

// This rank's input for a case: distinct values per rank and element.
std::vector<float> input(int rank, std::size_t elements) {
  std::vector<float> v(elements);
  for (std::size_t i = 0; i < elements; ++i)
    v[i] = static_cast<float>(rank * 1000 + static_cast<int>(i % 977)) - 3.5f;
  return v;
}

// Runs a case on host or emulated device buffers; returns the receive buffer afterwards (with
// its untouched parts, 0xAB bytes) and whether the send buffer was left as it was.
std::pair<std::vector<unsigned char>, bool> run_case(Communicator& comm, const Case& c,
                                                     std::size_t n, bool in_place, bool device) {
  const std::vector<float> in = input(comm.rank(), c.send);
  const std::size_t send_bytes = c.send * sizeof(float), recv_bytes = c.recv * sizeof(float);
  const auto* in_bytes = reinterpret_cast<const unsigned char*>(in.data());
  const Memory memory = device ? Memory::device : Memory::heap;
  auto as_floats = [](unsigned char* bytes) { return reinterpret_cast<float*>(bytes); };
  // The received bytes, from `at` of `buffer`.
  auto received = [&](TestBuffer& buffer, std::size_t at) {
    std::vector<unsigned char> bytes(recv_bytes);
    if (recv_bytes != 0) std::memcpy(bytes.data(), buffer.readable() + at, recv_bytes);
    return bytes;
  };
  if (in_place) {
    // One buffer holds the other, and starts with the input where the call's send data lies.
    const bool recv_outer = c.send_in_recv.has_value();
    const std::size_t inner_at = (recv_outer ? *c.send_in_recv : *c.recv_in_send) * sizeof(float);
    TestBuffer one(recv_outer ? recv_bytes : send_bytes, memory);
    if (recv_outer) {
      std::vector<unsigned char> start(recv_bytes, 0xAB);
      if (send_bytes != 0) std::memcpy(start.data() + inner_at, in_bytes, send_bytes);
      one.fill(start.data());
    } else {
      one.fill(in_bytes);
    }
    const std::size_t send_at = recv_outer ? inner_at : 0, recv_at = recv_outer ? 0 : inner_at;
    c.call(comm, as_floats(one.data() + send_at), as_floats(one.data() + recv_at), n);
    return {received(one, recv_at), true};
  }
  TestBuffer send(send_bytes, memory), recv(recv_bytes, memory);
  send.fill(in_bytes);
  recv.fill(static_cast<unsigned char>(0xAB));
  c.call(comm, as_floats(send.data()), as_floats(recv.data()), n);
  const bool send_kept = send_bytes == 0 || std::memcmp(send.readable(), in_bytes, send_bytes) == 0;
  return {received(recv, 0), send_kept};
}

TEST_P(DeviceBuffers, EveryCallMatchesTheSameCallOnHostBuffers) {
  if (skipped_here()) GTEST_SKIP() << "device staging is tested over shm";
  run_ranks(GetParam(), [](Communicator& comm) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099}}) {
      for (const Case& c : cases(comm.rank(), comm.size(), n)) {
        for (bool in_place : {false, true}) {
          if (in_place && !c.send_in_recv && !c.recv_in_send) continue;
          if (!in_place && c.in_place_only) continue;
          const std::string what = c.name + " count " + std::to_string(n) +
                                   (in_place ? " in place" : "") + " on rank " +
                                   std::to_string(comm.rank());
          const auto [on_host, host_kept] = run_case(comm, c, n, in_place, false);
          const auto [on_device, device_kept] = run_case(comm, c, n, in_place, true);
          EXPECT_EQ(on_device, on_host) << what;
          EXPECT_TRUE(device_kept) << what << ": the send buffer changed";
          EXPECT_TRUE(host_kept) << what << ": the send buffer changed";
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, DeviceBuffers, ::testing::Values(1, 2, 3, 5));

// Sends and receives between ranks of a host: a device buffer is read by the receiver from
// the sender's device (its allocation opened once, as CUDA IPC opens it), into device or host
// memory, and a host message lands in a device buffer; a buffer freed and allocated again is
// opened anew, never read through the old opening.
TEST(DeviceSends, ReadFromThePeersDeviceIntoEitherKind) {
  if (forced_transport() != "shm") GTEST_SKIP() << "shared device buffers are read over shm";
  run_ranks(3, [](Communicator& comm) {
    const int r = comm.rank(), p = comm.size();
    const int next = (r + 1) % p, previous = (r + p - 1) % p;
    auto device_with = [](const std::vector<unsigned char>& bytes) {
      void* d = emulated_device_alloc(bytes.size());
      emulated_device_write(d, bytes.data(), bytes.size());
      return d;
    };
    const auto opened_before = emulated_device_openings();
    int cases = 0;
    for (std::size_t bytes : {std::size_t{1}, std::size_t{4099 * 4}, std::size_t{1} << 20}) {
      for (bool send_on_device : {true, false}) {
        for (bool recv_on_device : {true, false}) {
          for (int round = 0; round < 2; ++round) {
            ++cases;
            std::vector<unsigned char> mine(bytes), expected(bytes);
            for (std::size_t i = 0; i < bytes; ++i) {
              mine[i] = static_cast<unsigned char>(r * 31 + cases * 7 + i % 251);
              expected[i] = static_cast<unsigned char>(previous * 31 + cases * 7 + i % 251);
            }
            // A fresh allocation each round: the first may be given the same addresses again.
            void* send = send_on_device ? device_with(mine) : mine.data();
            std::vector<unsigned char> host_recv(bytes, 0);
            void* recv = recv_on_device ? emulated_device_alloc(bytes) : host_recv.data();
            comm.sendrecv(send, bytes, next, recv, bytes, previous, 9);
            const auto got = recv_on_device ? emulated_device_read(recv, bytes) : host_recv;
            EXPECT_EQ(got, expected)
                << bytes << " B, send on device " << send_on_device << ", receive on device "
                << recv_on_device << ", round " << round;
            if (send_on_device) emulated_device_free(send);
            if (recv_on_device) emulated_device_free(recv);
          }
        }
      }
    }
    // Every message from a device buffer opened its allocation here: each was a new one.
    EXPECT_EQ(emulated_device_openings() - opened_before, 3u * 2 * 2);
  });
}

// CUDA maps another process's allocation once per process: two communicators of the same
// ranks reading the same device buffer share one opening of it, and either may read it while
// the other holds it; one closed, the other still reads it.
TEST(DeviceSends, CommunicatorsOfAProcessShareTheirOpenings) {
  if (forced_transport() != "shm") GTEST_SKIP() << "shared device buffers are read over shm";
  run_ranks(2, [](Communicator& comm) {
    const int r = comm.rank(), peer = 1 - r;
    constexpr std::size_t kBytes = 4099;
    std::vector<unsigned char> mine(kBytes), expected(kBytes);
    for (std::size_t i = 0; i < kBytes; ++i) {
      mine[i] = static_cast<unsigned char>(r * 31 + i % 251);
      expected[i] = static_cast<unsigned char>(peer * 31 + i % 251);
    }
    void* send = emulated_device_alloc(kBytes);
    emulated_device_write(send, mine.data(), kBytes);
    const auto opened_before = emulated_device_openings();
    auto other = comm.duplicate();
    for (int round = 0; round < 2; ++round) {
      for (Communicator* c : {&comm, other.get()}) {
        std::vector<unsigned char> got(kBytes, 0);
        c->sendrecv(send, kBytes, peer, got.data(), kBytes, peer, 3);
        EXPECT_EQ(got, expected) << "round " << round;
      }
    }
    EXPECT_EQ(emulated_device_openings() - opened_before, 1u);
    other.reset();
    std::vector<unsigned char> got(kBytes, 0);
    comm.sendrecv(send, kBytes, peer, got.data(), kBytes, peer, 3);
    EXPECT_EQ(got, expected) << "after the duplicate's end";
    EXPECT_EQ(emulated_device_openings() - opened_before, 1u) << "opened again after its end";
    comm.barrier();
    emulated_device_free(send);
  });
}

// A collective on device buffers, all ranks on one host over shm, runs on the device: its
// messages are read from the peers' buffers and scratch (their allocations opened here), and
// the results match those of host buffers for every algorithm it may run on, also where one
// rank's buffers are host memory.
TEST(DeviceSends, CollectivesOfOneHostRunOnTheDevice) {
  if (forced_transport() != "shm") GTEST_SKIP() << "shared device buffers are read over shm";
  for (const char* algorithm :
       {"ring", "direct", "halving_doubling", "recursive_doubling", "tree", "multi_ring"}) {
    SCOPED_TRACE(algorithm);
    run_ranks(3,
              [](Communicator& comm) {
                // Where every rank receives: each opens what its peers sent from.
                const std::set<std::string> everyone_receives = {"allreduce", "reduce_scatter",
                                                                 "allgather", "alltoall",
                                                                 "alltoallv", "sendrecv"};
                constexpr std::size_t kCount = (1 << 18) + 3;
                for (const Case& c : cases(comm.rank(), comm.size(), kCount)) {
                  const auto [on_host, host_kept] = run_case(comm, c, kCount, false, false);
                  const auto opened_before = emulated_device_openings();
                  const auto [on_device, device_kept] = run_case(comm, c, kCount, false, true);
                  EXPECT_EQ(on_device, on_host) << c.name;
                  EXPECT_TRUE(host_kept && device_kept) << c.name << ": the send buffer changed";
                  if (everyone_receives.count(c.name) != 0) {
                    EXPECT_GT(emulated_device_openings(), opened_before) << c.name;
                  }
                  // Rank 0 on host buffers beside ranks on the device: the same messages meet.
                  const auto mixed = run_case(comm, c, kCount, false, comm.rank() != 0).first;
                  EXPECT_EQ(mixed, on_host) << c.name << ", rank 0 on host buffers";
                }
              },
              {{"ARCOLL_ALGO", algorithm}});
  }
}

// Where a peer's transport cannot read device buffers (tcp, UCX, verbs; across the emulated
// hosts of the mixed run, beside shm within them), a collective of 1 MiB or more runs on the
// device all the same, each message to such a peer copied to host memory as it is sent: many
// copies, where a call below that size is copied to host memory whole (one copy per buffer).
// Both match the same call on host buffers; in the mixed run, peers of one host still read each
// other's device buffers.
TEST(DeviceSends, LargeCollectivesRunOnTheDeviceWithMessagesCopiedThroughTheHost) {
  // Emulated hosts, or one transport for every peer.
  const bool across_hosts = std::getenv("ARCOLL_EMULATED_HOSTS") != nullptr;
  if (!across_hosts && forced_transport().value_or("shm") == "shm")
    GTEST_SKIP() << "over shm every peer reads device buffers";
  run_ranks(4,
            [across_hosts](Communicator& comm) {
              for (std::size_t count : {std::size_t{4099}, (std::size_t{1} << 18) + 3}) {
                const bool by_message = count * sizeof(float) >= (std::size_t{1} << 20);
                for (const Case& c : cases(comm.rank(), comm.size(), count)) {
                  if (c.name == "sendrecv" || c.name == "isend/irecv") continue;  // not collectives
                  const auto [on_host, host_kept] = run_case(comm, c, count, false, false);
                  const auto copies_before = emulated_device_copies_to_host();
                  const auto opened_before = emulated_device_openings();
                  const auto [on_device, device_kept] = run_case(comm, c, count, false, true);
                  double moved[2] = {
                      static_cast<double>(emulated_device_copies_to_host() - copies_before),
                      static_cast<double>(emulated_device_openings() - opened_before)};
                  const std::string what = c.name + " count " + std::to_string(count);
                  EXPECT_EQ(on_device, on_host) << what;
                  EXPECT_TRUE(host_kept && device_kept) << what << ": the send buffer changed";
                  comm.allreduce(moved, 2, DataType::f64, ReduceOp::sum);
                  if (c.name != "allreduce" && c.name != "allgather" && c.name != "alltoall")
                    continue;
                  if (across_hosts) {
                    // Peers of one host read each other's buffers where the call runs on the
                    // device.
                    if (by_message)
                      EXPECT_GT(moved[1], 0) << what;
                    else
                      EXPECT_EQ(moved[1], 0) << what;
                    continue;
                  }
                  // Staged whole, each rank copies at most its send and receive buffers.
                  if (by_message)
                    EXPECT_GT(moved[0], 2 * comm.size()) << what;
                  else
                    EXPECT_LE(moved[0], 2 * comm.size()) << what;
                  EXPECT_EQ(moved[1], 0) << what;
                }
              }
            },
            {{"ARCOLL_ALGO", "ring"}});
}

// Device memory that cannot be shared with other processes (a CUDA pool's, which
// cudaIpcGetMemHandle refuses) keeps to host copies, for sends and collectives alike (those
// from 1 MiB message by message, as over a transport that cannot read device buffers).
TEST(DeviceSends, BuffersThatCannotBeSharedGoThroughHostCopies) {
  if (forced_transport() != "shm") GTEST_SKIP() << "shared device buffers are read over shm";
  run_ranks(3, [](Communicator& comm) {
    const auto opened_before = emulated_device_openings();
    constexpr std::size_t kCount = (1 << 16) + 5;
    const std::vector<float> in = input(comm.rank(), kCount);
    auto* send = static_cast<float*>(emulated_device_alloc_unshareable(kCount * sizeof(float)));
    auto* recv = static_cast<float*>(emulated_device_alloc_unshareable(kCount * sizeof(float)));
    emulated_device_write(send, in.data(), kCount * sizeof(float));
    const int p = comm.size(), previous = (comm.rank() + p - 1) % p;
    comm.sendrecv(send, kCount * sizeof(float), (comm.rank() + 1) % p, recv, kCount * sizeof(float),
                  previous, 4);
    auto bytes_of = [](const std::vector<float>& v) {
      const auto* b = reinterpret_cast<const unsigned char*>(v.data());
      return std::vector<unsigned char>(b, b + v.size() * sizeof(float));
    };
    EXPECT_EQ(emulated_device_read(recv, kCount * sizeof(float)),
              bytes_of(input(previous, kCount)));
    comm.allreduce(send, recv, kCount, DataType::f32, ReduceOp::max);
    EXPECT_EQ(emulated_device_read(recv, kCount * sizeof(float)), bytes_of(input(p - 1, kCount)));
    EXPECT_EQ(emulated_device_openings(), opened_before);
    emulated_device_free(send);
    emulated_device_free(recv);
  });
}

// A sender whose device buffer waits unread when its process dies: the receiver, which could
// not open the allocation, fails naming the rank within its deadline, never hangs or reads
// anything else.
TEST(DeviceSends, ASenderThatDiesBeforeItsBufferIsReadIsNamed) {
  if (forced_transport() != "shm") GTEST_SKIP() << "shared device buffers are read over shm";
  LocalLaunchOptions options;
  options.ranks = 2;
  options.env = {{"ARCOLL_TIMEOUT", "10"}};
  options.failure_grace = std::chrono::seconds(20);
  options.output = RankOutput::capture;
  const auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    constexpr std::size_t kBytes = 64 * 1024;
    void* buffer = emulated_device_alloc(kBytes);
    comm->barrier();
    if (comm->rank() == 0) {
      WorkPtr sent = comm->isend(buffer, kBytes, 1, 3);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the descriptor is out
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(800));  // the sender is gone
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->recv(buffer, kBytes, 0, 3);
      std::printf("the receive completed\n");
      return 4;
    } catch (const PeerError& e) {
      std::printf("after %.3f s: %s\n", seconds_since(start), e.what());
      return std::string(e.what()).find("rank 0") != std::string::npos ? 0 : 5;
    }
  });
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[1].ok()) << describe(exits);
  EXPECT_LT(number_after(exits[1].output, "after"), 5.0) << exits[1].output;
}

// A sender that gave up and freed the device buffer of a send it had posted, while its receiver
// had not opened it yet, alive still: the opening fails, and the receiver names the abort and
// its reason, which follow the send in the ring, not the failed opening (a process that is gone
// is the case above).
TEST(DeviceSends, AReaderOfAnAbortedRanksFreedBufferReportsTheAbort) {
  if (forced_transport() != "shm") GTEST_SKIP() << "shared device buffers are read over shm";
  const std::string reason = "rank 0 gave up before its device buffer was read";
  const auto exits = abort_then_free_before_the_read(
      64 * 1024, reason,
      {emulated_device_alloc, [](void* buffer, std::size_t) { emulated_device_free(buffer); }});
  ASSERT_EQ(exits.size(), 2u);
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << describe(exits);
  for (const std::string& said : {std::string("rank 0 aborted"), reason})
    EXPECT_NE(exits[1].output.find(said), std::string::npos) << exits[1].output;
}

}  // namespace
}  // namespace arcoll::testing
