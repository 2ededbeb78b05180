// The progress thread of non-blocking calls (src/core/work_queue): calls run one at a time in
// issue order, on a thread of their own unless their caller waits for them at once; a Work
// completes once, with its call's error if any, for any number of waiters and callbacks on any
// thread. Also run under ThreadSanitizer
// (tests/sanitizers), as the store's server is.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

#include "src/core/work_queue.hpp"

namespace arcoll {
namespace {

using namespace std::chrono_literals;

TEST(WorkQueue, RunsCallsInIssueOrderOnOneThreadOfItsOwn) {
  WorkQueue queue;
  EXPECT_TRUE(queue.idle());
  std::vector<int> order;  // written by the queue's thread only, read after drain()
  std::vector<std::thread::id> threads;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 100; ++i)
    works.push_back(queue.submit("call " + std::to_string(i), [&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      EXPECT_TRUE(queue.on_its_thread());
    }));
  EXPECT_FALSE(queue.on_its_thread());
  queue.drain();
  EXPECT_TRUE(queue.idle());
  EXPECT_EQ(queue.pending(), 0u);
  // drain() returns once the last call has run; Works complete after, in issue order.
  works.back()->wait();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[i], i);
    EXPECT_EQ(threads[i], threads[0]);
    EXPECT_TRUE(works[i]->test());
    EXPECT_EQ(works[i]->exception(), nullptr);
    EXPECT_EQ(works[i]->description(), "call " + std::to_string(i));
  }
  EXPECT_NE(threads[0], std::this_thread::get_id());
}

TEST(WorkQueue, AFailedCallsWorkRethrowsItsErrorToEveryWaiter) {
  WorkQueue queue;
  WorkPtr failed = queue.submit("failing", [] { throw std::runtime_error("the cause"); });
  WorkPtr after = queue.submit("after", [] {});
  EXPECT_THROW(
      {
        try {
          failed->wait();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "the cause");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_THROW(failed->wait_for(1s), std::runtime_error);
  EXPECT_NE(failed->exception(), nullptr);
  after->wait();  // the queue goes on: failing later calls is the communicator's rule
  EXPECT_EQ(after->exception(), nullptr);
}

TEST(WorkQueue, WaitForGivesUpOnARunningCall) {
  WorkQueue queue;
  std::atomic<bool> release{false};
  WorkPtr slow = queue.submit("slow", [&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  EXPECT_FALSE(slow->wait_for(20ms));
  EXPECT_FALSE(slow->test());
  EXPECT_FALSE(queue.idle());
  EXPECT_EQ(queue.pending(), 1u);
  release = true;
  EXPECT_TRUE(slow->wait_for(10s));
}

TEST(WorkQueue, CallbacksRunOnceWhetherRegisteredBeforeOrAfterCompletion) {
  WorkQueue queue;
  std::atomic<bool> release{false};
  std::atomic<int> before{0}, after{0};
  std::atomic<bool> before_on_queue_thread{false};
  std::atomic<bool> started{false};
  WorkPtr work = queue.submit("gated", [&] {
    started = true;
    while (!release) std::this_thread::sleep_for(1ms);
  });
  work->on_completion([&](const Work& done) {
    EXPECT_TRUE(done.test());
    before_on_queue_thread = queue.on_its_thread();
    // The queue counts the call done before its callbacks run: a caller that waited sees it
    // idle at once.
    EXPECT_EQ(queue.pending(), 0u);
    ++before;
  });
  // Left unclaimed, the call starts on the queue's thread (waited for at once, it would run on
  // this one).
  while (!started) std::this_thread::sleep_for(1ms);
  release = true;
  work->wait();
  queue.drain();
  // Callbacks run on the queue's thread just after the call is seen complete, so wait() may
  // return before they have: give them 5 s.
  for (int i = 0; i < 5000 && before.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  work->on_completion([&](const Work&) { ++after; });  // completed: runs here, now
  EXPECT_EQ(before.load(), 1);
  EXPECT_TRUE(before_on_queue_thread);
  EXPECT_EQ(after, 1);
}

// A call waited for as soon as it is issued runs on the waiting thread, so that blocking calls
// cost no hand-off; the progress thread runs a call nobody waits for within milliseconds, and at
// once the calls issued behind it. (A waiter descheduled for longer than the claim window
// loses its call to the progress thread: most, not all, must run here.)
TEST(WorkQueue, ACallWaitedForAtOnceRunsOnItsCallersThreadOthersOnTheQueues) {
  WorkQueue queue;
  const auto here = std::this_thread::get_id();
  int ran_here = 0;
  // Only the queue's own thread counts as a progress thread (its waits poll briefly): a call
  // run by its caller waits as its caller would.
  EXPECT_FALSE(WorkQueue::on_a_progress_thread());
  for (int i = 0; i < 200; ++i) {
    std::thread::id ran_on;
    bool as_progress_thread = false;
    queue
        .submit("waited for",
                [&] {
                  ran_on = std::this_thread::get_id();
                  as_progress_thread = WorkQueue::on_a_progress_thread();
                })
        ->wait();
    ran_here += ran_on == here;
    EXPECT_EQ(as_progress_thread, ran_on != here);
  }
  EXPECT_GT(ran_here, 150);
  EXPECT_FALSE(WorkQueue::on_a_progress_thread());

  std::atomic<int> on_queue_thread{0};
  std::vector<WorkPtr> left;
  for (int i = 0; i < 3; ++i)
    left.push_back(queue.submit("left alone", [&] {
      on_queue_thread += queue.on_its_thread() && WorkQueue::on_a_progress_thread();
    }));
  // Nobody waits: the three complete by themselves, on the queue's thread.
  for (int i = 0; i < 10000 && !left.back()->test(); ++i) std::this_thread::sleep_for(1ms);
  for (const WorkPtr& w : left) EXPECT_TRUE(w->test());
  EXPECT_EQ(on_queue_thread, 3);
}

// While calls keep coming and their callers run them, the progress thread sleeps: its timer is
// pushed back by the calls, not rung (with ranks on every core, each wake-up of a thread stalls
// a rank). 2000 calls 200 us apart take 400 ms or more, forty claim windows, in which a thread
// that looked at the queue once a window woke 40 times or more. The timer can only ring after
// a pause of half a window between two calls: a caller descheduled that long (a loaded
// machine: 24 wake-ups in one run of the suite) is allowed one wake-up per such pause.
TEST(WorkQueue, CallsWaitedForAtOnceDoNotWakeTheProgressThread) {
  constexpr std::chrono::microseconds kWindow = 10ms;  // the default claim window
  WorkQueue queue(kWindow);
  queue.submit("starts the thread", [] {})->wait();
  for (int i = 0; i < 5000 && queue.wakeups() == 0; ++i) std::this_thread::sleep_for(1ms);
  const std::uint64_t before = queue.wakeups();  // the first call's window ended
  std::uint64_t pauses = 0;
  auto last = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i) {
    const auto now = std::chrono::steady_clock::now();
    pauses += now - last >= kWindow / 2;
    last = now;
    queue.submit("waited for", [] {})->wait();
    std::this_thread::sleep_for(200us);
  }
  EXPECT_LT(queue.wakeups() - before, 15u + pauses) << pauses << " pauses of half a window";
}

// A call tested, or waited for with a deadline, goes to the progress thread at once instead of
// waiting out its claim window for its caller: here a minute, so that a call left so would not
// start within the 5 s the test gives each.
TEST(WorkQueue, ACallTestedOrWaitedForWithADeadlineStartsAtOnce) {
  WorkQueue queue(std::chrono::minutes(1));
  const WorkPtr tested = queue.submit("tested", [] {});
  for (int i = 0; i < 5000 && !tested->test(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(tested->test());
  EXPECT_TRUE(queue.submit("waited for with a deadline", [] {})->wait_for(5s));
}

// Many threads submit, wait, test and register callbacks at once (the data races
// ThreadSanitizer looks for).
TEST(WorkQueue, ManyThreadsSubmitAndWaitAtOnce) {
  WorkQueue queue;
  std::atomic<int> ran{0}, called_back{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      std::vector<WorkPtr> mine;
      for (int i = 0; i < 200; ++i) {
        mine.push_back(queue.submit("call", [&] { ++ran; }));
        mine.back()->on_completion([&](const Work&) { ++called_back; });
        (void)queue.idle();
        if (i % 7 == 0) (void)mine[i / 2]->test();
      }
      for (const WorkPtr& w : mine) w->wait();
    });
  for (auto& t : threads) t.join();
  queue.drain();
  // The queue counts a call done before it runs the call's callbacks (drain() and wait() may
  // return first): give the last ones 5 s.
  for (int i = 0; i < 5000 && called_back.load() < 800; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(ran, 800);
  EXPECT_EQ(called_back, 800);
}

// The queue's destructor runs what is still queued (its owner makes those calls fail fast
// first), so that no Work is left incomplete for a waiter.
TEST(WorkQueue, DestructionCompletesWhatIsQueued) {
  std::vector<WorkPtr> works;
  std::atomic<int> ran{0};
  {
    WorkQueue queue;
    for (int i = 0; i < 50; ++i)
      works.push_back(queue.submit("queued", [&] {
        std::this_thread::sleep_for(100us);
        ++ran;
      }));
  }
  EXPECT_EQ(ran, 50);
  for (const WorkPtr& w : works) EXPECT_TRUE(w->test());
}

}  // namespace
}  // namespace arcoll
