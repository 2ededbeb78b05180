#include "core/work_queue.hpp"

#include <utility>
#include <vector>

namespace arcoll {

namespace {
thread_local const WorkQueue* serving_queue = nullptr;  // the queue this thread runs, if any
}  // namespace

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

WorkPtr WorkQueue::submit(std::string description, std::function<void()> call) {
  auto work = std::make_shared<QueuedWork>(std::move(description));
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(work, std::move(call));
    ++pending_;
    if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
  }
  wake_.notify_one();
  return work;
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
    std::shared_ptr<QueuedWork> work;
    std::function<void()> call;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      // Stopping, the thread still runs what is queued: each call fails fast then.
      if (queue_.empty()) return;
      std::tie(work, call) = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    try {
      call();
    } catch (...) {
      error = std::current_exception();
    }
    call = nullptr;  // what it captured goes before the work is seen complete
    {
      // Counted down before the callbacks run: a caller that wait()ed for the last call finds
      // the queue idle at once and runs its next blocking call on its own thread.
      std::lock_guard lock(mutex_);
      --pending_;
    }
    drained_.notify_all();
    work->complete(std::move(error));
  }
}

}  // namespace arcoll
