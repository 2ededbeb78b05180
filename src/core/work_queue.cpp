#include "src/core/work_queue.hpp"

#include <utility>
#include <vector>

namespace arcoll {

namespace {
thread_local const WorkQueue* serving_queue = nullptr;  // the queue this thread runs, if any
}  // namespace

void QueuedWork::wait() {
  // A completed call's queue may be gone with its communicator: only a pending one is looked
  // for there.
  if (queue_ != nullptr && !test()) queue_->run_here(*this);
  std::unique_lock lock(mutex_);
  completed_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

WorkPtr WorkQueue::submit(std::string description, std::function<void()> call) {
  auto work = std::make_shared<QueuedWork>(std::move(description), this);
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({work, std::move(call)});
    ++pending_;
    if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
  }
  wake_.notify_one();
  return work;
}

bool WorkQueue::run_here(const QueuedWork& work) {
  if (on_its_thread()) return false;
  Queued next;
  {
    std::lock_guard lock(mutex_);
    if (running_ || queue_.empty() || queue_.front().work.get() != &work) return false;
    next = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
  }
  // While it runs, and its callbacks, this thread serves the queue: a blocking call there is
  // refused as on the progress thread.
  const WorkQueue* served = std::exchange(serving_queue, this);
  run(std::move(next));
  serving_queue = served;
  return true;
}

bool WorkQueue::idle() const {
  return pending_.load(std::memory_order_acquire) == 0;
}

std::size_t WorkQueue::pending() const {
  return pending_.load(std::memory_order_acquire);
}

bool WorkQueue::on_its_thread() const {
  return serving_queue == this;
}

void WorkQueue::drain() {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [&] { return pending_ == 0; });
}

void WorkQueue::serve() {
  serving_queue = this;
  while (true) {
    Queued next;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return (stopping_ && !running_) || (!queue_.empty() && !running_); });
      // Stopping, the thread still runs what is queued: each call fails fast then.
      if (queue_.empty()) return;
      next = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    run(std::move(next));
  }
}

void WorkQueue::run(Queued next) {
  std::exception_ptr error;
  try {
    next.call();
  } catch (...) {
    error = std::current_exception();
  }
  next.call = nullptr;  // what it captured goes before the work is seen complete
  {
    // Counted down before the callbacks run: a caller that wait()ed for the last call finds
    // the queue idle at once and runs its next blocking call on its own thread.
    std::lock_guard lock(mutex_);
    --pending_;
  }
  drained_.notify_all();
  // The next call starts once these callbacks have run, wherever it runs: they run in issue
  // order.
  next.work->complete(std::move(error));
  {
    std::lock_guard lock(mutex_);
    running_ = false;
  }
  wake_.notify_one();
}

}  // namespace arcoll
