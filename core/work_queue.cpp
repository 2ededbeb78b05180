#include "core/work_queue.hpp"

#include <utility>
#include <vector>

namespace arcoll {

namespace {
thread_local const WorkQueue* serving_queue = nullptr;  // the queue this thread runs, if any
}  // namespace

// The Work of a queued call: done (with or without an error) once, waited for by any number
// of threads.
class QueuedWork final : public Work {
 public:
  explicit QueuedWork(std::string description) : description_(std::move(description)) {}

  void wait() override {
    std::unique_lock lock(mutex_);
    completed_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mutex_);
    if (!completed_.wait_for(lock, timeout, [&] { return done_; })) return false;
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  bool test() const override {
    std::lock_guard lock(mutex_);
    return done_;
  }
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
  const std::string description_;
  mutable std::mutex mutex_;
  std::condition_variable completed_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<std::function<void(const Work&)>> callbacks_;
};

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
