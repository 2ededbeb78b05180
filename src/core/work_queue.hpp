// A communicator's non-blocking calls: run one after another, in the order they were issued,
// on a thread of their own that starts with the first of them (as MPI's and NCCL's calls are
// ordered per communicator), each completing its Work (arcoll/work.hpp). A call whose Work is
// waited for while it is next in line runs on the waiting thread instead: a call issued and
// waited for at once (torch's blocking calls are issued so) then costs no hand-off to the
// progress thread and back, which costs more than a small call itself.
//
// So the progress thread leaves a call to its caller for a while (the claim window, 10 ms)
// before it runs it, and is not woken for each call: it sleeps on a timer that each call
// issued with nothing ahead of it pushes back to its window's end, at most every half window,
// so that while calls keep coming and their callers run them it never wakes. With ranks on
// every core, each wake-up of a thread stalls a rank, and so does setting a timer: 2 ranks on
// 2 cores of an Intel Xeon VM, all-reduces through torch of 1 / 4 MiB took 133-138 / 681-690 us
// with a thread that looked at the queue every millisecond, 135-142 / 667-674 with the timer
// pushed back every 0.5 ms, 125-128 / 620-635 every 2 ms, 122-123 / 613-615 every 5 ms (arbench
// in place: 113-119 / 587-593). (A woken progress thread also took about half the calls from
// their waiting callers: a 1 KiB all-reduce through torch took 9.1 us so, 3.4 us without.) A
// call issued while another is pending, the one it was issued behind, and those after one that
// nobody waited for, do not wait: their caller is doing something else meanwhile.

#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "arcoll/work.hpp"

namespace arcoll {

class WorkQueue;

// The Work of a queued call (or of a parameter server's operation): done, with or without an
// error, once; waited for by any number of threads.
class QueuedWork final : public Work {
 public:
  explicit QueuedWork(std::string description, WorkQueue* queue = nullptr)
      : description_(std::move(description)), queue_(queue) {}

  // Runs the call on this thread when it is next in line and nothing runs (WorkQueue::run_here).
  void wait() override;
  // These two start a call still left to its caller at once (WorkQueue::start_now): a caller
  // that tests, or waits with a deadline of its own, is doing something else meanwhile.
  bool wait_for(std::chrono::milliseconds timeout) override;
  bool test() const override;
  std::exception_ptr exception() const override {
    std::lock_guard lock(mutex_);
    return error_;
  }
  void on_completion(std::function<void(const Work&)> callback) override {
    {
      std::lock_guard lock(mutex_);
      if (!done_) {
        callbacks_.push_back(std::move(callback));
        return;
      }
    }
    callback(*this);
  }
  const std::string& description() const override { return description_; }

  void complete(std::exception_ptr error) {
    std::vector<std::function<void(const Work&)>> callbacks;
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = std::move(error);
      callbacks.swap(callbacks_);
    }
    completed_.notify_all();
    for (auto& callback : callbacks) callback(*this);
  }

 private:
  bool completed() const;  // test() without starting the call

  const std::string description_;
  WorkQueue* const queue_;  // the queue it waits in; null for other Works
  mutable std::mutex mutex_;
  std::condition_variable completed_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void(const Work&)>> callbacks_;
};

class WorkQueue {
 public:
  // `claim_window`: how long a call waits for its caller to run it (half of it at least, all
  // of it at most) before the progress thread does (the default: kClaimWindow).
  explicit WorkQueue(std::chrono::microseconds claim_window = kClaimWindow)
      : claim_window_(claim_window) {}
  // Runs what is queued to its end (the owner makes it fail fast first), then stops.
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `call`, which runs the call and throws its error; its Work completes when it has.
  WorkPtr submit(std::string description, std::function<void()> call);
  // Nothing queued or running: a blocking call may then run on the caller's own thread.
  bool idle() const;
  // Waits until every call issued so far has run. Their Works complete a moment later, on
  // the queue's thread, with their callbacks (see serve()).
  void drain();
  // Calls queued or running.
  std::size_t pending() const;
  // Whether the caller is this queue's thread (a completion callback): waiting there for
  // queued work would wait for itself.
  bool on_its_thread() const;
  // Whether the caller is some queue's progress thread: it runs calls for callers doing
  // something else meanwhile, whose threads may want the cores it would poll on.
  static bool on_a_progress_thread();
  // The thread that waits for `work` runs it, when it is next in line and no call runs (the
  // progress thread has not taken it yet: it leaves it to its caller for the claim window):
  // true then, once it has run and its Work has completed (callbacks on this thread).
  bool run_here(const QueuedWork& work);
  // The progress thread runs `work` as soon as it is next in line, without leaving it to its
  // caller for the claim window (nothing when it has started already).
  void start_now(const QueuedWork& work);
  // How often the progress thread has woken so far.
  std::uint64_t wakeups() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued {
    std::shared_ptr<QueuedWork> work;
    std::function<void()> call;
    Clock::time_point queued_at;
    bool now = false;  // the progress thread runs it as soon as it is next
  };
  void serve();
  // Takes the call in front into `next` when the progress thread should run it now (mutex_
  // held).
  bool take_front(Queued& next);
  void run(Queued next);  // with running_ set; clears it
  // Sets the timer the progress thread sleeps on to ring at `at` (mutex_ held).
  void ring_at(Clock::time_point at);
  // The timer rings now: the thread looks at the queue as soon as it can (mutex_ held).
  void ring_now();
  // Has the timer ring by the end of the claim window of a call queued at `queued_at` (at the
  // front, left to its caller), unless it rings in its second half already (mutex_ held).
  void ring_for(Clock::time_point queued_at);

  // Far longer than a caller takes from issuing a call to waiting for it (a few microseconds
  // through torch). A call nobody waits for waits out its window only when nothing is issued
  // behind it and nobody tests it (DDP's buckets come one after another, and through torch
  // asking for a call's future tests it).
  static constexpr std::chrono::microseconds kClaimWindow{10'000};
  const std::chrono::microseconds claim_window_;
  mutable std::mutex mutex_;
  std::condition_variable drained_;  // drain(): nothing pending
  std::deque<Queued> queue_;
  bool running_ = false;  // a call runs, on the thread or on a waiter's
  std::atomic<std::size_t> pending_{0};  // changed under mutex_, read without it by idle()
  bool stopping_ = false;
  // The last call waited for its caller in vain: the calls that follow run at once.
  bool eager_ = false;
  // The progress thread's timer (a timerfd, made with the thread) and when it rings: the
  // thread sleeps reading it. Clock::time_point::max() once the thread has read it and nobody
  // set it again.
  int timer_ = -1;
  Clock::time_point rings_at_ = Clock::time_point::max();
  std::uint64_t wakeups_ = 0;
  std::thread thread_;  // started by the first submit
};

}  // namespace arcoll
