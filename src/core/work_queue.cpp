#include "src/core/work_queue.hpp"

#include <utility>
#include <vector>

namespace arcoll {

namespace {
thread_local const WorkQueue* serving_queue = nullptr;  // the queue this thread runs, if any

// How long a call waits for its caller to run it before the progress thread does: far longer
// than a caller takes from issuing a call to waiting for it (a few microseconds through
// torch), short against the calls that overlap with computation (DDP's buckets).
constexpr auto kClaimWindow = std::chrono::milliseconds(1);
// How long the progress thread keeps looking at the queue after the last call was issued.
constexpr auto kWatchFor = 20 * kClaimWindow;
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
  bool wake;
  {
    std::lock_guard lock(mutex_);
    const bool now = eager_ || pending_ > 0;
    last_submit_ = Clock::now();
    queue_.push_back({work, std::move(call), last_submit_, now});
    ++pending_;
    if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
    wake = now || !watching_;
  }
  if (wake) wake_.notify_one();
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
    eager_ = false;
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
  std::unique_lock lock(mutex_);
  watching_ = true;
  while (true) {
    Queued next;
    if (take_front(next)) {
      lock.unlock();
      run(std::move(next));
      lock.lock();
      continue;
    }
    // Stopping, the thread still runs what is queued (each call fails fast then).
    if (stopping_ && !running_ && queue_.empty()) return;
    if (!running_ && !queue_.empty()) {
      wake_.wait_until(lock, queue_.front().queued_at + kClaimWindow);
    } else if (Clock::now() - last_submit_ < kWatchFor) {
      wake_.wait_for(lock, kClaimWindow);
    } else {
      watching_ = false;
      wake_.wait(lock);
      watching_ = true;
    }
  }
}

bool WorkQueue::take_front(Queued& next) {
  if (running_ || queue_.empty()) return false;
  Queued& front = queue_.front();
  // A call with others issued behind it is not being waited for either: its caller went on.
  const bool left = queue_.size() > 1 || Clock::now() >= front.queued_at + kClaimWindow;
  if (!front.now && !stopping_ && !left) return false;
  if (!front.now && left) eager_ = true;
  next = std::move(front);
  queue_.pop_front();
  running_ = true;
  return true;
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
  bool more;
  {
    std::lock_guard lock(mutex_);
    running_ = false;
    more = !queue_.empty() || stopping_;
  }
  if (more) wake_.notify_one();  // a caller's call ended with nothing behind it: nothing to do
}

}  // namespace arcoll
