// Non-blocking calls on real ranks: many outstanding at once complete in issue order with
// right results (blocking calls between them keep their place), callbacks run once each, and
// every failure path reaches queued work: a mismatched call fails it and every later one with
// its cause, abort() fails what is queued on every rank, and destroying a communicator with
// work in flight fails that work on every rank instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "arcoll/error.hpp"
#include "tests/support/ranks.hpp"
#include "tests/support/reference.hpp"

namespace arcoll::testing {
namespace {

using Clock = std::chrono::steady_clock;

// MPI's progress rule: a non-blocking send or receive completes whatever its caller does
// next. isend then a blocking recv on a ring (a large send waits for its receiver, whose recv
// would otherwise be queued behind its own isend), irecv then a blocking send, and both
// non-blocking with a collective after them, at 8 B and 8 MiB, on 2 and 3 ranks.
TEST(NonBlocking, SendsAndReceivesCompleteWhateverTheCallerDoesNext) {
  for (const std::size_t bytes : {std::size_t{8}, std::size_t{8} << 20})
    for (const int world : {2, 3}) {
      SCOPED_TRACE(std::to_string(bytes) + " B on " + std::to_string(world) + " ranks");
      run_ranks(world, [&](Communicator& comm) {
        const int next = (comm.rank() + 1) % world, prev = (comm.rank() + world - 1) % world;
        auto pattern = [&](int rank, std::size_t round) {
          return make_input(DataType::u8, ReduceOp::sum, rank, bytes, round);
        };
        std::vector<unsigned char> in(bytes);
        auto out = pattern(comm.rank(), 0);
        WorkPtr sent = comm.isend(out.data(), bytes, next, 1);
        comm.recv(in.data(), bytes, prev, 1);
        EXPECT_EQ(in, pattern(prev, 0));
        sent->wait();

        WorkPtr received = comm.irecv(in.data(), bytes, prev, 2);
        out = pattern(comm.rank(), 1);
        comm.send(out.data(), bytes, next, 2);
        received->wait();
        EXPECT_EQ(in, pattern(prev, 1));

        out = pattern(comm.rank(), 2);
        received = comm.irecv(in.data(), bytes, prev, 3);
        sent = comm.isend(out.data(), bytes, next, 3);
        std::int32_t one = 1;
        comm.allreduce(&one, 1, DataType::i32, ReduceOp::sum);
        EXPECT_EQ(one, world);
        sent->wait();
        received->wait();
        EXPECT_EQ(in, pattern(prev, 2));
      });
    }
}

// A callback on a transfer's Work whose caller let go of the Work before the transfer ended
// still gets that Work, whole (the sanitized build would catch a dangling one).
TEST(NonBlocking, ACallbackOutlivesTheWorkItsCallerLetGo) {
  run_ranks(2, [](Communicator& comm) {
    const int peer = 1 - comm.rank();
    std::vector<std::uint64_t> out(1 << 17, static_cast<std::uint64_t>(comm.rank())), in(out.size());
    std::string seen;
    {
      WorkPtr sent = comm.isend(out.data(), out.size() * 8, peer, 7);
      sent->on_completion([&](const Work& done) {
        seen = done.description() + (done.exception() ? " failed" : " done");
      });
    }
    comm.recv(in.data(), in.size() * 8, peer, 7);
    comm.barrier();  // moves the engine until this rank's send has ended
    EXPECT_EQ(in, std::vector<std::uint64_t>(in.size(), static_cast<std::uint64_t>(peer)));
    EXPECT_EQ(seen, "send of 1048576 B to rank " + std::to_string(peer) + " (tag 7) done");
  });
}

TEST(NonBlocking, ManyOutstandingCallsCompleteInOrderWithRightResults) {
  run_ranks(3, [](Communicator& comm) {
    const int p = comm.size();
    constexpr int kCalls = 40;
    std::vector<std::vector<unsigned char>> buffers;
    std::vector<WorkPtr> works;
    std::mutex order_mutex;
    std::vector<int> completed;  // call indices in completion order
    std::vector<std::size_t> counts;
    for (int i = 0; i < kCalls; ++i) {
      // Sizes across the eager limit and the pipeline chunk; every fifth call a broadcast.
      const std::size_t count = 1 + static_cast<std::size_t>(i * 7919 % 300000);
      counts.push_back(count);
      buffers.push_back(make_input(DataType::f32, ReduceOp::sum, comm.rank(), count,
                                   static_cast<std::size_t>(i)));
      works.push_back(i % 5 == 4 ? comm.ibroadcast(buffers.back().data(), count, DataType::f32, i % p)
                                 : comm.iallreduce(buffers.back().data(), buffers.back().data(),
                                                   count, DataType::f32, ReduceOp::sum));
      works.back()->on_completion([&, i](const Work& w) {
        EXPECT_TRUE(w.test());
        std::lock_guard lock(order_mutex);
        completed.push_back(i);
      });
      // A blocking call among them takes its turn after what was issued before it.
      if (i == kCalls / 2) {
        std::int32_t one = 1;
        comm.allreduce(&one, 1, DataType::i32, ReduceOp::sum);
        EXPECT_EQ(one, p);
        for (int j = 0; j <= i; ++j) EXPECT_TRUE(works[static_cast<std::size_t>(j)]->test()) << j;
      }
    }
    for (const WorkPtr& w : works) w->wait();
    for (int i = 0; i < kCalls; ++i) {
      const auto& b = buffers[static_cast<std::size_t>(i)];
      const std::size_t count = counts[static_cast<std::size_t>(i)];
      if (i % 5 == 4)
        EXPECT_EQ(b, make_input(DataType::f32, ReduceOp::sum, i % p, count,
                                static_cast<std::size_t>(i)))
            << "broadcast " << i;
      else
        EXPECT_EQ(count_wrong(b.data(), DataType::f32, ReduceOp::sum, p, count,
                              static_cast<std::size_t>(i)),
                  0u)
            << "allreduce " << i;
      EXPECT_EQ(works[static_cast<std::size_t>(i)]->exception(), nullptr);
    }
    std::lock_guard lock(order_mutex);
    ASSERT_EQ(completed.size(), static_cast<std::size_t>(kCalls));
    for (int i = 0; i < kCalls; ++i) EXPECT_EQ(completed[static_cast<std::size_t>(i)], i);
    // A callback added after completion runs at once, on this thread.
    bool ran = false;
    works.front()->on_completion([&](const Work&) { ran = true; });
    EXPECT_TRUE(ran);
  });
}

TEST(NonBlocking, EveryCollectiveHasAFormThatMatchesTheBlockingOne) {
  run_ranks(4, [](Communicator& comm) {
    const int p = comm.size(), rank = comm.rank();
    const auto P = static_cast<std::size_t>(p);
    const std::size_t n = 1031;
    auto in = [&](int owner, std::size_t count, std::size_t salt) {
      return make_input(DataType::i64, ReduceOp::sum, owner, count, salt);
    };
    auto rs_in = in(rank, P * n, 1);
    std::vector<unsigned char> rs_out(n * 8), ag_out(P * n * 8), red_out(n * 8), ga_out(P * n * 8),
        sc_out(n * 8), a2a_out(P * n * 8), a2av_out(P * n * 8);
    auto ag_in = in(rank, n, 2), red_in = in(rank, n, 3), ga_in = in(rank, n, 4),
         sc_in = in(rank, P * n, 5), a2a_in = in(rank, P * n, 6), bc = in(rank, n, 7);
    std::vector<std::size_t> v_counts(P, n), v_offsets(P);
    for (std::size_t q = 0; q < P; ++q) v_offsets[q] = q * n;
    std::vector<Buffer> coalesced_buffers;
    std::vector<std::vector<unsigned char>> pieces;
    for (std::size_t piece : {std::size_t{3}, std::size_t{0}, std::size_t{5000}}) {
      pieces.push_back(make_input(DataType::i64, ReduceOp::sum, rank, piece, 8 + piece));
      coalesced_buffers.push_back({pieces.back().data(), piece});
    }
    std::vector<WorkPtr> works = {
        comm.ireduce_scatter(rs_in.data(), rs_out.data(), n, DataType::i64, ReduceOp::sum),
        comm.iallgather(ag_in.data(), ag_out.data(), n, DataType::i64),
        comm.ireduce(red_in.data(), red_out.data(), n, DataType::i64, ReduceOp::sum, 1),
        comm.igather(ga_in.data(), ga_out.data(), n, DataType::i64, 2),
        comm.iscatter(sc_in.data(), sc_out.data(), n, DataType::i64, 3),
        comm.ialltoall(a2a_in.data(), a2a_out.data(), n, DataType::i64),
        comm.ialltoallv(a2a_in.data(), v_counts, v_offsets, a2av_out.data(), v_counts, v_offsets,
                        DataType::i64),
        comm.ibroadcast(bc.data(), n, DataType::i64, 0),
        comm.iallreduce_coalesced(coalesced_buffers, DataType::i64, ReduceOp::sum),
        comm.ibarrier(),
    };
    for (const WorkPtr& w : works) w->wait();
    EXPECT_EQ(count_wrong(rs_out.data(), DataType::i64, ReduceOp::sum, p, n, 1,
                          static_cast<std::size_t>(rank) * n),
              0u);
    for (int q = 0; q < p; ++q) {
      auto b = in(q, n, 2);
      EXPECT_TRUE(std::equal(b.begin(), b.end(), ag_out.begin() + q * n * 8)) << "allgather " << q;
    }
    if (rank == 1) {
      EXPECT_EQ(count_wrong(red_out.data(), DataType::i64, ReduceOp::sum, p, n, 3), 0u);
    }
    if (rank == 2) {
      for (int q = 0; q < p; ++q) {
        auto b = in(q, n, 4);
        EXPECT_TRUE(std::equal(b.begin(), b.end(), ga_out.begin() + q * n * 8)) << "gather " << q;
      }
    }
    auto root_blocks = in(3, P * n, 5);
    EXPECT_TRUE(std::equal(sc_out.begin(), sc_out.end(), root_blocks.begin() + rank * n * 8));
    for (int q = 0; q < p; ++q) {
      auto theirs = in(q, P * n, 6);
      EXPECT_TRUE(std::equal(a2a_out.begin() + q * n * 8, a2a_out.begin() + (q + 1) * n * 8,
                             theirs.begin() + rank * n * 8))
          << "alltoall " << q;
    }
    EXPECT_EQ(a2a_out, a2av_out);
    EXPECT_EQ(bc, in(0, n, 7));
    for (std::size_t i = 0; i < pieces.size(); ++i)
      EXPECT_EQ(count_wrong(pieces[i].data(), DataType::i64, ReduceOp::sum, p,
                            coalesced_buffers[i].count, 8 + coalesced_buffers[i].count),
                0u)
          << "coalesced buffer " << i;
    // The blocking coalesced all-reduce, on fresh values in the same buffers.
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const std::size_t count = coalesced_buffers[i].count;
      const auto fresh = make_input(DataType::i64, ReduceOp::sum, rank, count, 9 + count);
      std::copy(fresh.begin(), fresh.end(), pieces[i].begin());
    }
    comm.allreduce_coalesced(coalesced_buffers, DataType::i64, ReduceOp::sum);
    for (std::size_t i = 0; i < pieces.size(); ++i)
      EXPECT_EQ(count_wrong(pieces[i].data(), DataType::i64, ReduceOp::sum, p,
                            coalesced_buffers[i].count, 9 + coalesced_buffers[i].count),
                0u)
          << "blocking coalesced buffer " << i;
  });
}

TEST(NonBlocking, BadCallsThrowAtOnceAndQueueNothing) {
  run_ranks(2, [](Communicator& comm) {
    std::int32_t v[4] = {1, 2, 3, 4};
    EXPECT_THROW(comm.iallreduce(v, v, 4, DataType::i32, ReduceOp::avg), InvalidArgument);
    EXPECT_THROW(comm.ibroadcast(v, 4, DataType::i32, 5), InvalidArgument);
    EXPECT_THROW(comm.ialltoall(v, v + 1, 1, DataType::i32), InvalidArgument);  // overlapping
    std::vector<std::size_t> two(2, 1), three(3, 0);
    EXPECT_THROW(comm.ialltoallv(v, two, three, v + 2, two, two, DataType::i32), InvalidArgument);
    std::vector<Buffer> overlapping = {{v, 3}, {v + 2, 2}};
    EXPECT_THROW(comm.iallreduce_coalesced(overlapping, DataType::i32, ReduceOp::sum),
                 InvalidArgument);
    WorkPtr w = comm.iallreduce(v, v, 4, DataType::i32, ReduceOp::sum);
    w->wait();
    EXPECT_EQ(v[0], 2);
  });
}

// Rank 1 issues calls of another size than the others at call 3: that call fails on every
// rank naming both sides, and every call queued after it fails with that cause. (Calls 0 to 2
// are over on every rank first: a call still running on one rank when another gives up fails
// too, as it must.)
TEST(NonBlocking, AFailedCallFailsEveryLaterOneWithItsCause) {
  LocalLaunchOptions options;
  options.ranks = 3;
  options.env = {{"ARCOLL_TIMEOUT", "20"}};
  auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    std::vector<std::vector<float>> buffers;
    std::vector<WorkPtr> works;
    for (int i = 0; i < 8; ++i) {
      if (i == 3) {
        for (const WorkPtr& w : works) w->wait();
        // A rank may still be in the barrier when the others have left it and failed call 3:
        // its barrier then fails with that cause, and so do its calls 3 to 7.
        try {
          comm->barrier();
        } catch (const Error& e) {
          std::printf("barrier: %s\n", e.what());
        }
      }
      const std::size_t count = i == 3 && comm->rank() == 1 ? 999 : 1000;
      buffers.emplace_back(count, 1.0f);
      works.push_back(comm->iallreduce(buffers.back().data(), buffers.back().data(), count,
                                       DataType::f32, ReduceOp::sum));
    }
    int failed = 0;
    for (int i = 0; i < 8; ++i) {
      try {
        works[static_cast<std::size_t>(i)]->wait();
        if (i >= 3) return 10 + i;  // a call at or after the mismatch succeeded
      } catch (const Error& e) {
        ++failed;
        if (i < 3) return 20 + i;  // one before it failed
        std::printf("call %d: %s\n", i, e.what());
      }
    }
    return failed == 5 ? 0 : 30;
  });
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    // The later calls name the earlier failure.
    EXPECT_NE(e.output.find("call 7: "), std::string::npos) << e.output;
    EXPECT_NE(e.output.find("earlier failure"), std::string::npos) << e.output;
  }
}

// Rank 2 aborts as soon as it has queued many large calls (each takes a millisecond or more,
// so at most the first has run; no time window is assumed): on every rank the calls from the
// one rank 2 gave up on fail, the last among them, and the ranks exit within the timeout.
TEST(NonBlocking, AbortFailsWhatIsQueuedOnEveryRank) {
  LocalLaunchOptions options;
  options.ranks = 3;
  options.env = {{"ARCOLL_TIMEOUT", "20"}};
  options.failure_grace = std::chrono::seconds(30);
  auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    comm->barrier();  // every rank done joining (rank 0's store read) before the abort
    std::vector<std::vector<float>> buffers(30, std::vector<float>(1 << 20, 1.0f));
    std::vector<WorkPtr> works;
    for (auto& b : buffers)
      works.push_back(comm->iallreduce(b.data(), b.data(), b.size(), DataType::f32, ReduceOp::sum));
    if (comm->rank() == 2) comm->abort("the watchdog gave up");
    const auto start = Clock::now();
    int failed = 0;
    for (const WorkPtr& w : works) {
      try {
        w->wait();
      } catch (const Error& e) {
        if (failed++ == 0) std::printf("first failure: %s\n", e.what());
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("%d of %zu calls failed within %.2f s\n", failed, works.size(), seconds);
    return failed > 0 && seconds < 15 && works.back()->exception() != nullptr ? 0 : 3;
  });
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    EXPECT_NE(e.output.find("the watchdog gave up"), std::string::npos) << e.output;
  }
}

// Rank 0 destroys its communicator with calls queued: its own calls fail (none hangs), and
// every other rank's calls fail naming rank 0 within the timeout.
TEST(NonBlocking, DestroyingACommunicatorWithWorkInFlightFailsIt) {
  LocalLaunchOptions options;
  options.ranks = 3;
  options.env = {{"ARCOLL_TIMEOUT", "20"}};
  options.failure_grace = std::chrono::seconds(30);
  auto exits = launch(options, [] {
    auto comm = Communicator::from_env();
    comm->barrier();  // every rank done joining (rank 0's store read) before rank 0 leaves
    const int rank = comm->rank();
    std::vector<std::vector<float>> buffers(20, std::vector<float>(1 << 20, 1.0f));
    std::vector<WorkPtr> works;
    for (auto& b : buffers)
      works.push_back(comm->iallreduce(b.data(), b.data(), b.size(), DataType::f32, ReduceOp::sum));
    const auto start = Clock::now();
    if (rank == 0) comm.reset();
    int failed = 0;
    std::string first;
    for (const WorkPtr& w : works) {
      try {
        w->wait();
      } catch (const Error& e) {
        if (failed++ == 0) first = e.what();
      }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("rank %d: %d calls failed within %.2f s; first: %s\n", rank, failed, seconds,
                first.c_str());
    return failed > 0 && seconds < 15 ? 0 : 3;
  });
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << describe(exits);
    if (e.rank != 0) {
      EXPECT_NE(e.output.find("rank 0"), std::string::npos) << e.output;
    }
  }
  EXPECT_NE(exits[0].output.find("destroyed"), std::string::npos) << exits[0].output;
}

// wait_for gives up while a peer has not joined the call yet; the call completes once it has.
TEST(NonBlocking, WaitForGivesUpOnACallStillRunning) {
  run_ranks(2, [](Communicator& comm) {
    std::int32_t v = 1;
    if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    WorkPtr w = comm.iallreduce(&v, &v, 1, DataType::i32, ReduceOp::sum);
    if (comm.rank() == 0) {
      EXPECT_FALSE(w->wait_for(std::chrono::milliseconds(50)));
      EXPECT_FALSE(w->test());
    }
    EXPECT_TRUE(w->wait_for(std::chrono::seconds(20)));
    EXPECT_EQ(v, 2);
    EXPECT_EQ(w->description(), "allreduce of 1 i32");
  });
}

// A completion callback runs on the thread that ran the call (the progress thread, or the
// waiter that ran it itself): it may issue non-blocking calls, which queue after what is
// queued (as PowerSGD's hooks chain all-reduces); a blocking call there, with calls queued,
// would wait for a call that cannot start before the callback ends, and is refused before
// anything is sent.
TEST(NonBlocking, CallbacksIssueNonBlockingCallsAndAreRefusedBlockingOnes) {
  run_ranks(3, [](Communicator& comm) {
    const int rank = comm.rank();
    std::vector<std::int32_t> first(1000, rank + 1), chained(1000, 1), later(1000, 2);
    // Rank 1 comes late, so that the others' first call is still running when its callback
    // is registered: theirs runs when the call completes.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    WorkPtr w = comm.iallreduce(first.data(), first.data(), first.size(), DataType::i32,
                                ReduceOp::sum);
    WorkPtr later_work = comm.iallreduce(later.data(), later.data(), later.size(),
                                         DataType::i32, ReduceOp::sum);
    std::mutex mutex;
    WorkPtr chained_work;
    std::atomic<bool> registering{true};
    bool at_completion = false;  // not at once, on registration
    std::string refused;
    w->on_completion([&](const Work&) {
      std::lock_guard lock(mutex);
      chained_work = comm.iallreduce(chained.data(), chained.data(), chained.size(),
                                     DataType::i32, ReduceOp::sum);
      at_completion = !registering.load();
      if (!at_completion) return;  // (completed already: run here, outside any call)
      try {
        comm.barrier();  // `later` is queued behind this callback
      } catch (const InvalidArgument& e) {
        refused = e.what();
      }
    });
    registering = false;
    w->wait();
    later_work->wait();
    WorkPtr chained_now;
    for (int i = 0; i < 4000 && !chained_now; ++i) {
      {
        std::lock_guard lock(mutex);
        chained_now = chained_work;
      }
      if (!chained_now) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(chained_now);
    chained_now->wait();
    EXPECT_EQ(first[0], 6);
    EXPECT_EQ(later[999], 6);
    EXPECT_EQ(chained[500], 3);
    std::lock_guard lock(mutex);
    if (rank == 0) {
      EXPECT_TRUE(at_completion);
    }
    if (at_completion) {
      EXPECT_NE(refused.find("completion callback"), std::string::npos) << refused;
    }
    comm.barrier();  // nothing of the refused barrier is left over to mismatch this one
  });
}

}  // namespace
}  // namespace arcoll::testing
