// Collectives on real ranks over loopback TCP, checked element by element against a
// double-precision reference, for many world sizes, counts, types and operators.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "arcoll/error.hpp"
#include "arcoll/memory.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

// Small chunks and several sockets per peer: many pipeline steps, frames striped over sockets.
TEST(Allreduce, SmallChunksAndStripedSockets) {
  run_ranks(3,
            [](Communicator& comm) {
              EXPECT_EQ(comm.options().chunk_bytes, 4096u);
              for (std::size_t count : {std::size_t{1}, std::size_t{999}, std::size_t{100003}}) {
                auto input = make_input(DataType::f32, ReduceOp::sum, comm.rank(), count, 7);
                std::vector<unsigned char> out(input.size());
                comm.allreduce(input.data(), out.data(), count, DataType::f32, ReduceOp::sum);
                EXPECT_EQ(
                    count_wrong(out.data(), DataType::f32, ReduceOp::sum, comm.size(), count, 7),
                    0u);
              }
            },
            {{"ARCOLL_CHUNK_BYTES", "4K"}, {"ARCOLL_SOCKETS_PER_PEER", "3"}});
  run_ranks(4,
            [](Communicator& comm) {
              // 4 MiB chunks are striped over 3 sockets in 512 KiB frames.
              const std::size_t count = 3'000'017;
              auto input = make_input(DataType::f64, ReduceOp::max, comm.rank(), count, 3);
              comm.allreduce(input.data(), count, DataType::f64, ReduceOp::max);
              EXPECT_EQ(
                  count_wrong(input.data(), DataType::f64, ReduceOp::max, comm.size(), count, 3),
                  0u);
            },
            {{"ARCOLL_CHUNK_BYTES", "4M"}, {"ARCOLL_SOCKETS_PER_PEER", "3"}});
}

class CollectiveWorld : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveWorld, ReduceScatterAllgatherBroadcastBarrier) {
  run_ranks(GetParam(), [](Communicator& comm) {
    const int p = comm.size();
    const auto P = static_cast<std::size_t>(p);
    for (DataType t : {DataType::f32, DataType::bf16, DataType::i64, DataType::u8}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::avg}) {
        if (!is_supported(t, op)) continue;
        for (std::size_t count :
             {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{5003}}) {
          const std::size_t e = size_of(t);
          // reduce_scatter: rank r gets block r of the reduction of P*count elements.
          auto input = make_input(t, op, comm.rank(), P * count, 11);
          std::vector<unsigned char> out(count * e);
          comm.reduce_scatter(input.data(), out.data(), count, t, op);
          EXPECT_EQ(count_wrong(out.data(), t, op, p, count, 11,
                                static_cast<std::size_t>(comm.rank()) * count),
                    0u)
              << "reduce_scatter " << label(t, op, count, false);
          // In place: the block sits at its own offset of the input.
          comm.reduce_scatter(input.data(),
                              input.data() + static_cast<std::size_t>(comm.rank()) * count * e,
                              count, t, op);
          EXPECT_EQ(count_wrong(input.data() + static_cast<std::size_t>(comm.rank()) * count * e, t,
                                op, p, count, 11, static_cast<std::size_t>(comm.rank()) * count),
                    0u)
              << "reduce_scatter " << label(t, op, count, true);
        }
      }
      for (std::size_t count :
           {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{5003}}) {
        const std::size_t e = size_of(t);
        // allgather: block r holds rank r's input.
        auto mine = make_input(t, ReduceOp::max, comm.rank(), count, 5);
        std::vector<unsigned char> all(P * count * e);
        comm.allgather(mine.data(), all.data(), count, t);
        for (int r = 0; r < p; ++r)
          EXPECT_TRUE(std::equal(all.begin() + static_cast<std::ptrdiff_t>(r * count * e),
                                 all.begin() + static_cast<std::ptrdiff_t>((r + 1) * count * e),
                                 make_input(t, ReduceOp::max, r, count, 5).begin()))
              << "allgather block " << r << " count " << count;
        // broadcast from every root.
        for (int root = 0; root < p; ++root) {
          auto buffer = make_input(t, ReduceOp::max, comm.rank(), count, 9);
          comm.broadcast(buffer.data(), count, t, root);
          EXPECT_EQ(buffer, make_input(t, ReduceOp::max, root, count, 9))
              << "broadcast root " << root;
        }
      }
    }
    comm.barrier();
  });
}

// Broadcasts of several chunks from every root: on more than 2 ranks each rank but the chain's
// last passes them on (over shm, chunks past 256 KiB read across from the sender's buffer, the
// rest through the rings); over UCX the root sends the whole buffer to each rank at once.
TEST(Broadcast, ChunksPassedDownTheChainFromEveryRoot) {
  for (int world : {3, 4}) {
    run_ranks(world, [](Communicator& comm) {
      for (std::size_t count : {std::size_t{65537}, std::size_t{300007}}) {
        for (int root = 0; root < comm.size(); ++root) {
          auto buffer = make_input(DataType::f32, ReduceOp::max, comm.rank(), count, 13);
          comm.broadcast(buffer.data(), count, DataType::f32, root);
          EXPECT_EQ(buffer, make_input(DataType::f32, ReduceOp::max, root, count, 13))
              << "broadcast of " << count << " from root " << root;
        }
      }
    });
  }
}

// Reduce, gather and scatter from roots that vary with the case, and all-to-all with equal and
// unequal blocks (some empty), for every type (and every op of reduce), against the reference.
TEST_P(CollectiveWorld, ReduceGatherScatterAlltoall) {
  run_ranks(GetParam(), [](Communicator& comm) {
    const int p = comm.size(), rank = comm.rank();
    const auto P = static_cast<std::size_t>(p);
    const std::size_t counts[] = {0, 1, 7, 5003};
    int root = 0;
    auto next_root = [&] { return root = (root + 1) % p; };
    int cases = 0;
    for (DataType t : kAllDataTypes) {
      const std::size_t e = size_of(t);
      for (ReduceOp op : kAllReduceOps) {
        if (!is_supported(t, op)) continue;
        for (std::size_t count : counts) {
          const int r = next_root();
          auto input = make_input(t, op, rank, count, 13);
          std::vector<unsigned char> out(count * e);
          // In place on the root every other case.
          const bool in_place = ++cases % 2 == 0;
          comm.reduce(input.data(), rank == r ? (in_place ? input.data() : out.data()) : nullptr,
                      count, t, op, r);
          if (rank == r) {
            EXPECT_EQ(count_wrong(in_place ? input.data() : out.data(), t, op, p, count, 13), 0u)
                << "reduce to root " << r << " " << label(t, op, count, in_place);
          }
        }
      }
      for (std::size_t count : counts) {
        const std::size_t block = count * e;
        auto block_of = [&](int owner) { return make_input(t, ReduceOp::max, owner, count, 17); };
        // gather: block q of the root's buffer is rank q's input; in place every other case.
        const int r = next_root();
        const bool in_place = ++cases % 2 == 0;
        std::vector<unsigned char> all(P * block);
        auto mine = block_of(rank);
        if (in_place && rank == r) std::copy(mine.begin(), mine.end(), all.begin() + r * block);
        comm.gather(in_place && rank == r ? all.data() + r * block : mine.data(),
                    rank == r ? all.data() : nullptr, count, t, r);
        if (rank == r) {
          for (int q = 0; q < p; ++q)
            EXPECT_TRUE(std::equal(all.begin() + q * block, all.begin() + (q + 1) * block,
                                   block_of(q).begin()))
                << "gather to root " << r << " block " << q << " " << to_string(t) << " count "
                << count << (in_place ? " in place" : "");
        }
        // scatter: rank q gets block q of the root's buffer; in place on the root as gather.
        const int s = next_root();
        std::vector<unsigned char> source(P * block), got(block);
        for (int q = 0; q < p; ++q) {
          auto b = block_of(q + 100);
          std::copy(b.begin(), b.end(), source.begin() + q * block);
        }
        comm.scatter(rank == s ? source.data() : nullptr,
                     in_place && rank == s ? source.data() + s * block : got.data(), count, t, s);
        const unsigned char* landed = in_place && rank == s ? source.data() + s * block : got.data();
        EXPECT_TRUE(std::equal(landed, landed + block, block_of(rank + 100).begin()))
            << "scatter from root " << s << " " << to_string(t) << " count " << count
            << (in_place ? " in place" : "");
        // alltoall: block q of rank a's input goes to block a of rank q's output.
        std::vector<unsigned char> send(P * block), recv(P * block);
        for (int q = 0; q < p; ++q) {
          auto b = block_of(rank * p + q);
          std::copy(b.begin(), b.end(), send.begin() + q * block);
        }
        comm.alltoall(send.data(), recv.data(), count, t);
        for (int q = 0; q < p; ++q)
          EXPECT_TRUE(std::equal(recv.begin() + q * block, recv.begin() + (q + 1) * block,
                                 block_of(q * p + rank).begin()))
              << "alltoall block from rank " << q << " count " << count;
      }
      // alltoallv: rank a sends (a + 2b + salt) % 5 * 211 elements to rank b (some empty), the
      // blocks laid out with gaps and in reverse rank order on the receiving side.
      for (std::size_t salt : {std::size_t{0}, std::size_t{3}}) {
        auto amount = [&](int from, int to) {
          return static_cast<std::size_t>((from + 2 * to + static_cast<int>(salt)) % 5) * 211;
        };
        std::vector<std::size_t> send_counts(P), send_offsets(P), recv_counts(P), recv_offsets(P);
        std::size_t send_total = 0, recv_total = 0;
        for (int q = 0; q < p; ++q) {
          send_counts[q] = amount(rank, q);
          send_offsets[q] = send_total + 3;  // a gap before each block
          send_total += send_counts[q] + 3;
        }
        for (int q = p - 1; q >= 0; --q) {
          recv_counts[q] = amount(q, rank);
          recv_offsets[q] = recv_total;
          recv_total += recv_counts[q] + 1;
        }
        std::vector<unsigned char> send(send_total * e), recv(recv_total * e);
        for (int q = 0; q < p; ++q) {
          auto b = make_input(t, ReduceOp::max, rank * p + q, send_counts[q], salt);
          std::copy(b.begin(), b.end(), send.begin() + send_offsets[q] * e);
        }
        comm.alltoallv(send.data(), send_counts, send_offsets, recv.data(), recv_counts,
                       recv_offsets, t);
        for (int q = 0; q < p; ++q) {
          auto want = make_input(t, ReduceOp::max, q * p + rank, recv_counts[q], salt);
          EXPECT_TRUE(std::equal(want.begin(), want.end(), recv.begin() + recv_offsets[q] * e))
              << "alltoallv block from rank " << q << " (" << recv_counts[q] << " "
              << to_string(t) << ")";
        }
      }
    }
  });
}

// A barrier holds every rank until all have entered it: ranks arrive one after another (each
// later than the last), count themselves in memory they all share, and after the barrier each
// must see every rank counted; blocking and non-blocking, several in a row. A barrier that
// let a rank through early would show a count short (the delays only make that likely; the
// assertion holds whatever the timing).
TEST_P(CollectiveWorld, BarrierHoldsEveryRankUntilAllHaveEntered) {
  constexpr int kRounds = 3;
  auto* arrived = static_cast<std::atomic<int>*>(::mmap(nullptr, sizeof(std::atomic<int>) * kRounds,
                                                        PROT_READ | PROT_WRITE,
                                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(arrived, MAP_FAILED);
  for (int round = 0; round < kRounds; ++round) new (&arrived[round]) std::atomic<int>(0);
  run_ranks(GetParam(), [&](Communicator& comm) {
    for (int round = 0; round < kRounds; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * comm.rank()));
      arrived[round].fetch_add(1);
      if (round == 1)
        comm.ibarrier()->wait();
      else
        comm.barrier();
      EXPECT_EQ(arrived[round].load(), comm.size()) << "round " << round << ", rank " << comm.rank();
    }
  });
  ::munmap(arrived, sizeof(std::atomic<int>) * kRounds);
}

// Named by world size, as runs leave some out by name (tests/CMakeLists.txt).
INSTANTIATE_TEST_SUITE_P(WorldSizes, CollectiveWorld, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8),
                         ::testing::PrintToStringParamName());

// Buffers from mem_alloc: over shared memory, messages of 512 KiB and more (of calls without
// streaming stores) are read, or reduced, straight out of the sender's buffer; over other
// transports they travel as any others, which their runs show on 2 and 3 ranks (the larger
// worlds are the shm. and mixed. runs').
class SharedBuffers : public ::testing::TestWithParam<int> {};

TEST_P(SharedBuffers, AllreduceMatchesReference) {
  if (GetParam() > 3 && forced_transport().value_or("shm") != "shm")
    GTEST_SKIP() << "no shared memory between these ranks' transport";
  run_ranks(GetParam(), [](Communicator& comm) {
    check_allreduce(comm, 21, Coverage::sampled, Memory::shared);
  });
}

// Named by world size: the runs whose ranks share no memory leave out those beyond 3 by name
// (tests/CMakeLists.txt).
INSTANTIATE_TEST_SUITE_P(WorldSizes, SharedBuffers, ::testing::Values(2, 3, 5, 8),
                         ::testing::PrintToStringParamName());

// A send waits for its receive (the receiver reads the sender's buffer), and a region given
// back and allocated again, perhaps at the same address, is read afresh: the receiver keeps
// no stale mapping of it.
TEST(SharedBuffersPointToPoint, ReceiversReadTheCurrentRegion) {
  run_ranks(2, [](Communicator& comm) {
    constexpr std::size_t kCount = (4 << 20) / 4 + 3;  // 4 MiB and 3 elements
    for (std::uint32_t round = 0; round < 3; ++round) {
      auto* buffer = static_cast<std::uint32_t*>(mem_alloc(kCount * 4));
      if (comm.rank() == 0) {
        std::iota(buffer, buffer + kCount, round * 1000u);
        comm.send(buffer, kCount * 4, 1, 0);
        comm.send(buffer + 5, 200000 * 4, 1, 1);  // from inside the region
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the send comes first
        comm.recv(buffer, kCount * 4, 0, 0);
        std::vector<std::uint32_t> part(200000);
        comm.recv(part.data(), part.size() * 4, 0, 1);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < kCount; ++i) wrong += buffer[i] != round * 1000u + i;
        for (std::size_t i = 0; i < part.size(); ++i) wrong += part[i] != round * 1000u + 5 + i;
        EXPECT_EQ(wrong, 0u) << "round " << round;
      }
      comm.barrier();
      mem_free(buffer);
    }
    int stranger = 0;
    EXPECT_THROW(mem_free(&stranger), InvalidArgument);
    mem_free(nullptr);
  });
}

TEST(PointToPoint, TagsMatchInOrderAndLargeMessagesArrive) {
  run_ranks(3, [](Communicator& comm) {
    if (comm.rank() == 0) {
      // Small messages on two tags, received in the opposite tag order.
      int a = 1, b = 2, c = 3;
      comm.send(&a, sizeof a, 1, 5);
      comm.send(&b, sizeof b, 1, 6);
      comm.send(&c, sizeof c, 1, 5);
      std::vector<std::uint32_t> big(3'000'001);
      std::iota(big.begin(), big.end(), 7u);
      comm.send(big.data(), big.size() * 4, 2, 0);
      comm.send(nullptr, 0, 2, 1);
    } else if (comm.rank() == 1) {
      int x = 0, y = 0, z = 0;
      comm.recv(&y, sizeof y, 0, 6);
      comm.recv(&x, sizeof x, 0, 5);
      comm.recv(&z, sizeof z, 0, 5);
      EXPECT_EQ(x, 1);
      EXPECT_EQ(y, 2);
      EXPECT_EQ(z, 3);
    } else {
      std::vector<std::uint32_t> big(3'000'001);
      comm.recv(big.data(), big.size() * 4, 0, 0);
      for (std::size_t i = 0; i < big.size(); ++i)
        if (big[i] != 7u + i) {
          ADD_FAILURE() << "element " << i << " is " << big[i];
          break;
        }
      comm.recv(nullptr, 0, 0, 1);
    }
    comm.barrier();
  });
}

// Messages m = 0, 1, ... of `words` words each on tag 0, word i of message m being
// m * 7919 + i: posted at once (where such a message is not eager, a blocking send would wait
// for its receive), and kept until their sends end.
class NumberedSends {
 public:
  NumberedSends(Communicator& comm, int count, std::size_t words, int peer)
      : sent_(static_cast<std::size_t>(count), std::vector<std::uint32_t>(words)) {
    for (std::size_t m = 0; m < sent_.size(); ++m) {
      std::iota(sent_[m].begin(), sent_[m].end(), static_cast<std::uint32_t>(m) * 7919u);
      sends_.push_back(comm.isend(sent_[m].data(), words * 4, peer, 0));
    }
  }
  void wait() {
    for (const WorkPtr& send : sends_) send->wait();
  }

 private:
  std::vector<std::vector<std::uint32_t>> sent_;
  std::vector<WorkPtr> sends_;
};

// Receives `count` NumberedSends messages from `peer`, in order, and checks each.
void expect_numbered(Communicator& comm, int count, std::size_t words, int peer) {
  std::vector<std::uint32_t> got(words);
  for (int m = 0; m < count; ++m) {
    comm.recv(got.data(), words * 4, peer, 0);
    for (std::size_t i = 0; i < words; ++i)
      if (got[i] != static_cast<std::uint32_t>(m) * 7919u + i) {
        ADD_FAILURE() << "message " << m << " element " << i << " is " << got[i];
        return;
      }
  }
}

// Many eager messages that all arrive before their receives (rank 0 first waits for a message
// rank 1 sends after them, on another tag): more than a transport holds of them in its own
// buffers (UCX: kHeldEagerBytes, 4 MiB, then copies), each one piece over UCX (messages of
// several pieces: the reductions of the collectives' tests). Every one lands whole and in
// order.
TEST(PointToPoint, EagerMessagesBeyondWhatIsHeldArriveWhole) {
  run_ranks(2, [](Communicator& comm) {
    constexpr int kMessages = 400;
    constexpr std::size_t kWords = 32 * 1024 / 4;  // 32 KiB: eager over UCX (kCopyEagerBytes)
    int last = 0;
    if (comm.rank() == 1) {
      NumberedSends sends(comm, kMessages, kWords, 0);
      last = kMessages;
      comm.send(&last, sizeof last, 0, 1);
      sends.wait();
    } else {
      comm.recv(&last, sizeof last, 1, 1);
      EXPECT_EQ(last, kMessages);
      expect_numbered(comm, kMessages, kWords, 1);
    }
    comm.barrier();
  });
}

// Small blocking sends behind non-blocking ones of the same tag that wait for room (12 KiB
// messages through the shared-memory rings, more than a ring holds): each small one keeps its
// turn, though it would fit into the ring before the one queued ahead of it. The receiver
// starts late, so that the queue builds; what it checks does not depend on that.
TEST(PointToPoint, ASmallSendKeepsItsTurnBehindQueuedOnes) {
  run_ranks(2, [](Communicator& comm) {
    constexpr int kQueued = 160;
    constexpr std::uint32_t kSmall = 3;
    constexpr std::size_t kWords = 12 * 1024 / 4;
    if (comm.rank() == 0) {
      NumberedSends sends(comm, kQueued, kWords, 1);
      for (std::uint32_t small = 0; small < kSmall; ++small) comm.send(&small, sizeof small, 1, 0);
      sends.wait();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      expect_numbered(comm, kQueued, kWords, 0);
      for (std::uint32_t small = 0; small < kSmall; ++small) {
        std::uint32_t got = ~0u;
        comm.recv(&got, sizeof got, 0, 0);
        EXPECT_EQ(got, small);
      }
    }
    comm.barrier();
  });
}

// A rank that sends and leaves (its communicator destroyed, its process ended) before the
// receive is posted: what it sent still arrives. Rank 0 waits for rank 2 first, so that it sees
// rank 1 gone while rank 1's message (larger than an eager one, copied through the ring, not
// read in place) waits unmatched; a correct program does not fail on that timing.
TEST(PointToPoint, WhatARankThatLeftSentStillArrives) {
  run_ranks(3,
            [](Communicator& comm) {
              std::vector<std::uint32_t> big(50'001);
              if (comm.rank() == 1) {
                std::iota(big.begin(), big.end(), 3u);
                comm.send(big.data(), big.size() * 4, 0, 0);
              } else if (comm.rank() == 2) {
                std::this_thread::sleep_for(std::chrono::milliseconds(300));
                comm.send(big.data(), 4, 0, 0);
              } else {
                comm.recv(big.data(), 4, 2, 0);
                comm.recv(big.data(), big.size() * 4, 1, 0);
                for (std::size_t i = 0; i < big.size(); ++i)
                  if (big[i] != 3u + i) {
                    ADD_FAILURE() << "element " << i << " is " << big[i];
                    break;
                  }
              }
            },
            {{"ARCOLL_SHM_SINGLE_COPY_BYTES", "1M"}});
}

// Every rank sends to the next and receives from the one before at once: as send-then-receive
// on every rank this would deadlock on messages too large to go without a receiver.
TEST(PointToPoint, SendrecvShiftsRoundARing) {
  for (int world : {2, 3, 5}) {
    run_ranks(world, [](Communicator& comm) {
      const int next = (comm.rank() + 1) % comm.size();
      const int previous = (comm.rank() + comm.size() - 1) % comm.size();
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{262'147}}) {
        std::vector<std::uint32_t> out(count), in(count, 0);
        std::iota(out.begin(), out.end(), static_cast<std::uint32_t>(comm.rank()) * 1'000'003u);
        comm.sendrecv(out.data(), count * 4, next, in.data(), count * 4, previous, 3);
        for (std::size_t i = 0; i < count; ++i)
          if (in[i] != static_cast<std::uint32_t>(previous) * 1'000'003u + i) {
            ADD_FAILURE() << "rank " << comm.rank() << ", count " << count << ": element " << i
                          << " is " << in[i];
            break;
          }
      }
      std::uint32_t v = 0;
      EXPECT_THROW(comm.sendrecv(&v, 4, comm.size(), &v, 4, previous), InvalidArgument);
      EXPECT_THROW(comm.sendrecv(nullptr, 4, next, &v, 4, previous), InvalidArgument);
      comm.barrier();
    });
  }
}

// In place (one buffer sent from and received into): what goes out is what the buffer held
// before the call, sent whole into a shared-memory ring where it fits, else from a copy (a
// message larger than a ring: 1.2 MB).
TEST(PointToPoint, SendrecvInPlaceShiftsRoundARing) {
  for (int world : {2, 3}) {
    run_ranks(world, [](Communicator& comm) {
      const int next = (comm.rank() + 1) % comm.size();
      const int previous = (comm.rank() + comm.size() - 1) % comm.size();
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4097},
                                std::size_t{262'147}, std::size_t{300'007}}) {
        std::vector<std::uint32_t> buffer(count);
        std::iota(buffer.begin(), buffer.end(), static_cast<std::uint32_t>(comm.rank()) * 7u);
        comm.sendrecv(buffer.data(), count * 4, next, buffer.data(), count * 4, previous, 5);
        for (std::size_t i = 0; i < count; ++i)
          if (buffer[i] != static_cast<std::uint32_t>(previous) * 7u + i) {
            ADD_FAILURE() << "rank " << comm.rank() << ", count " << count << ": element " << i
                          << " is " << buffer[i];
            break;
          }
      }
      comm.barrier();
    });
  }
}

// A receive with nothing posted or held before it from its peer takes its message from the
// transport at once (Transport::receive_now); one posted earlier keeps its turn: it takes the
// first message of its tag, and the send/recv after it the second, at every size up to what a
// ring takes whole and beyond. A message of another size than its receive fails the receive
// naming both sizes.
TEST(PointToPoint, AReceivePostedEarlierKeepsItsTurn) {
  for (int world : {2, 3}) {
    run_ranks(world, [](Communicator& comm) {
      const int next = (comm.rank() + 1) % comm.size();
      const int previous = (comm.rank() + comm.size() - 1) % comm.size();
      const auto word = [](int rank, int message, std::size_t i) {
        return static_cast<std::uint32_t>(rank) * 1'000'003u +
               static_cast<std::uint32_t>(message) * 7919u + static_cast<std::uint32_t>(i);
      };
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{2}, std::size_t{17},
                                std::size_t{1021}, std::size_t{16'381}, std::size_t{16'411}}) {
        std::vector<std::uint32_t> first(count), second(count), out(count);
        WorkPtr early = comm.irecv(first.data(), count * 4, previous, 9);
        for (std::size_t i = 0; i < count; ++i) out[i] = word(comm.rank(), 1, i);
        comm.send(out.data(), count * 4, next, 9);
        for (std::size_t i = 0; i < count; ++i) out[i] = word(comm.rank(), 2, i);
        comm.sendrecv(out.data(), count * 4, next, second.data(), count * 4, previous, 9);
        early->wait();
        for (std::size_t i = 0; i < count; ++i)
          if (first[i] != word(previous, 1, i) || second[i] != word(previous, 2, i)) {
            ADD_FAILURE() << "rank " << comm.rank() << ", count " << count << ": element " << i
                          << " is " << first[i] << " and " << second[i];
            break;
          }
      }
      comm.barrier();
    });
  }
  run_ranks(2, [](Communicator& comm) {
    std::uint64_t value = 5;
    if (comm.rank() == 0) {
      comm.send(&value, sizeof value, 1, 4);
      return;
    }
    try {
      comm.recv(&value, 4, 0, 4);
      ADD_FAILURE() << "a receive of 4 B took a message of 8 B";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 sent 8 B where this rank expected 4 B"),
                std::string::npos)
          << e.what();
    }
  });
}

// An in-place send/recv behind non-blocking sends of its tag still queued (rank 1 starts
// late): it keeps its turn, and goes from a copy of what the buffer held.
TEST(PointToPoint, AnInPlaceSendrecvKeepsItsTurnBehindQueuedSends) {
  run_ranks(2, [](Communicator& comm) {
    constexpr int kQueued = 40;
    constexpr std::size_t kWords = 48 * 1024 / 4;
    constexpr std::size_t kCount = 100'003;
    std::vector<std::uint32_t> buffer(kCount);
    std::iota(buffer.begin(), buffer.end(), static_cast<std::uint32_t>(comm.rank()) * 11u);
    const int peer = 1 - comm.rank();
    if (comm.rank() == 0) {
      NumberedSends sends(comm, kQueued, kWords, 1);
      comm.sendrecv(buffer.data(), kCount * 4, peer, buffer.data(), kCount * 4, peer, 0);
      sends.wait();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      expect_numbered(comm, kQueued, kWords, 0);
      comm.sendrecv(buffer.data(), kCount * 4, peer, buffer.data(), kCount * 4, peer, 0);
    }
    for (std::size_t i = 0; i < kCount; ++i)
      if (buffer[i] != static_cast<std::uint32_t>(peer) * 11u + i) {
        ADD_FAILURE() << "rank " << comm.rank() << ": element " << i << " is " << buffer[i];
        break;
      }
    comm.barrier();
  });
}

TEST(Errors, BadCallsAreRejectedAndTheCommunicatorStaysUsable) {
  run_ranks(2, [](Communicator& comm) {
    std::int32_t v[4] = {1, 2, 3, 4};
    EXPECT_THROW(comm.allreduce(v, 4, DataType::i32, ReduceOp::avg), InvalidArgument);
    EXPECT_THROW(comm.allreduce(nullptr, v, 4, DataType::i32, ReduceOp::sum), InvalidArgument);
    EXPECT_THROW(comm.broadcast(v, 4, DataType::i32, 2), InvalidArgument);
    EXPECT_THROW(comm.send(v, 4, comm.rank(), 0), InvalidArgument);
    EXPECT_THROW(comm.send(v, 4, 1 - comm.rank(), -1), InvalidArgument);
    // Overlapping buffers other than the in-place forms.
    std::int32_t w[8] = {};
    EXPECT_THROW(comm.allreduce(w, w + 1, 4, DataType::i32, ReduceOp::sum), InvalidArgument);
    EXPECT_THROW(comm.reduce_scatter(w, w + 1, 2, DataType::i32, ReduceOp::sum), InvalidArgument);
    EXPECT_THROW(comm.allgather(w + 1, w, 2, DataType::i32), InvalidArgument);
    EXPECT_THROW(comm.set_timeout(std::chrono::milliseconds(0)), InvalidArgument);
    // The in-place forms are accepted (and checked by the collective tests).
    comm.reduce_scatter(w, w + 2 * comm.rank(), 2, DataType::i32, ReduceOp::sum);
    comm.allgather(w + 2 * comm.rank(), w, 2, DataType::i32);
    try {
      comm.allreduce(v, 4, DataType::i32, ReduceOp::avg);
      ADD_FAILURE() << "avg on i32 was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("avg"), std::string::npos) << e.what();
      EXPECT_EQ(e.rank(), comm.rank());
    }
    // Nothing was sent by the rejected calls: the next collective works.
    comm.allreduce(v, 4, DataType::i32, ReduceOp::sum);
    EXPECT_EQ(v[0], 2);
    EXPECT_EQ(v[3], 8);
  });
}

// A duplicate is a communicator of its own: its collectives run while the original's
// non-blocking ones are in flight, on another thread, and neither sees the other's messages.
TEST(Duplicate, RunsBesideTheOriginalWithoutMeetingIt) {
  run_ranks(3, [](Communicator& comm) {
    std::unique_ptr<Communicator> twin = comm.duplicate();
    ASSERT_EQ(twin->rank(), comm.rank());
    ASSERT_EQ(twin->size(), comm.size());
    std::vector<std::int64_t> a(100000, comm.rank() + 1), b(100000, 10 * (comm.rank() + 1));
    WorkPtr original = comm.iallreduce(a.data(), a.data(), a.size(), DataType::i64, ReduceOp::sum);
    std::thread other([&] {
      twin->allreduce(b.data(), b.size(), DataType::i64, ReduceOp::max);
      twin->barrier();
    });
    other.join();
    original->wait();
    EXPECT_EQ(a.front(), 6);
    EXPECT_EQ(a.back(), 6);
    EXPECT_EQ(b.front(), 30);
    EXPECT_EQ(b.back(), 30);
  });
}

// `rounds` f32 sums, on `first` and `second` in turn, each result checked; `count_of` a round's
// element count.
void allreduces_in_turn(Communicator& first, Communicator& second, int rounds,
                        const std::function<std::size_t(int)>& count_of) {
  for (int round = 0; round < rounds; ++round) {
    Communicator& now = round % 2 == 0 ? first : second;
    const std::size_t count = count_of(round);
    auto data = make_input(DataType::f32, ReduceOp::sum, first.rank(), count, round);
    now.allreduce(data.data(), count, DataType::f32, ReduceOp::sum);
    ASSERT_EQ(
        count_wrong(data.data(), DataType::f32, ReduceOp::sum, first.size(), count, round), 0u)
        << "round " << round;
  }
}

// Gathers back to back with blocks on both sides of UCX's piece size (a gather's blocks go
// eager at every size, in pieces of 32 KiB) and of shm's single copy (16 KiB), to roots in
// turn: every piece of every block lands where it belongs, also where it came before the root
// posted its receive (UCX keeps it meanwhile), also for blocks of many pieces (1.2 MiB).
TEST(Gather, BackToBackAcrossTheEagerLimits) {
  run_ranks(3, [](Communicator& comm) {
    const int p = comm.size(), rank = comm.rank();
    const std::size_t counts[] = {0, 1, 8191, 8193, 65536, 65537, 90001, 300001};
    constexpr std::size_t kCalls = 12;
    for (std::size_t count : counts) {
      // Four calls in a row to each root, with nothing between them: its senders, done at
      // once, run ahead of it. Inputs are made, and results checked, outside the calls.
      auto root_of = [&](std::size_t call) { return static_cast<int>((count + call / 4) % 3); };
      const std::size_t block = count * sizeof(float);
      std::vector<std::vector<unsigned char>> mine, all;
      for (std::size_t call = 0; call < kCalls; ++call) {
        mine.push_back(make_input(DataType::f32, ReduceOp::max, rank, count, call));
        all.emplace_back(rank == root_of(call) ? block * static_cast<std::size_t>(p) : 0);
      }
      for (std::size_t call = 0; call < kCalls; ++call)
        comm.gather(mine[call].data(), all[call].empty() ? nullptr : all[call].data(), count,
                    DataType::f32, root_of(call));
      for (std::size_t call = 0; call < kCalls; ++call) {
        if (rank != root_of(call)) continue;
        for (int q = 0; q < p; ++q)
          EXPECT_TRUE(std::equal(all[call].begin() + q * block, all[call].begin() + (q + 1) * block,
                                 make_input(DataType::f32, ReduceOp::max, q, count, call).begin()))
              << "gather of " << count << " to root " << root_of(call) << ", block " << q
              << ", call " << call;
      }
    }
  });
}

// Two communicators in turn, with large messages cut into many chunks: a rank that has all
// it needs from one call goes on to the other communicator while a peer may still wait there
// for the end of its sends (over UCX, a rendezvous's acknowledgement queued in the receiver's
// worker; 260 KiB chunks are each a rendezvous there, and a short fifo queues them often).
// Every call must end, with the right result (before the fix: a timeout in 3 of 4 runs of 120
// calls over UCX; the other transports, which queue nothing of the kind, make fewer).
TEST(Duplicate, CommunicatorsInTurnWithManyLargeMessages) {
  const int rounds = forced_transport() == "ucx" ? 120 : 30;
  run_ranks(
      4,
      [&](Communicator& comm) {
        std::unique_ptr<Communicator> twin = comm.duplicate();
        allreduces_in_turn(comm, *twin, rounds, [](int) { return std::size_t{500'009}; });
      },
      {{"ARCOLL_CHUNK_BYTES", "260K"}, {"UCX_POSIX_FIFO_SIZE", "4"}});
}

// A UCX communicator over UCX's TCP and a TCP one in turn, with the messages of 8 KiB and more
// that UCX completes only once its endpoint is flushed: a rank that has what it needs from a
// UCX call goes on to the TCP one, where it must still answer its peers' flushes of the UCX
// call they have not left (parked, transports/common/parked.hpp). Every call must end, with
// the right result. (On one host this passed before parking too; between emulated hosts on
// slower links it did not: cluster.ucx_beside_tcp_2x2.)
TEST(Duplicate, AUcxCommunicatorAndATcpOneInTurn) {
  if (forced_transport() != "ucx") GTEST_SKIP() << "run on the ucx run only";
  run_ranks(
      4,
      [](Communicator& comm) {
        Options over_tcp = comm.options();
        over_tcp.transport = "tcp";
        std::unique_ptr<Communicator> twin = comm.duplicate(over_tcp);
        allreduces_in_turn(comm, *twin, 400, [](int round) {
          return 2048 + 1031 * static_cast<std::size_t>(round % 7);
        });
      },
      {{"UCX_TLS", "tcp"}});
}

// Split: ranks of one color form a communicator in their old order; a negative color joins
// none. Each group's collectives see only its ranks, and the original still works.
TEST(Split, GroupsRanksByColorInTheirOrder) {
  run_ranks(5, [](Communicator& comm) {
    const int color = comm.rank() == 4 ? -1 : comm.rank() % 2;  // {0, 2}, {1, 3}, rank 4 none
    std::unique_ptr<Communicator> group = comm.split(color);
    if (color < 0) {
      EXPECT_EQ(group, nullptr);
    } else {
      ASSERT_NE(group, nullptr);
      EXPECT_EQ(group->size(), 2);
      EXPECT_EQ(group->rank(), comm.rank() / 2);
      std::int32_t sum = comm.rank();
      group->allreduce(&sum, 1, DataType::i32, ReduceOp::sum);
      EXPECT_EQ(sum, color == 0 ? 0 + 2 : 1 + 3);
    }
    std::int32_t all = 1;
    comm.allreduce(&all, 1, DataType::i32, ReduceOp::sum);
    EXPECT_EQ(all, 5);
  });
}

}  // namespace
}  // namespace arcoll::testing
