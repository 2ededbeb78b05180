#include "src/core/work_queue.hpp"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <utility>
#include <vector>

namespace arcoll {

namespace {
thread_local const WorkQueue* serving_queue = nullptr;  // the queue this thread runs, if any
thread_local bool progress_thread = false;               // serve() runs on this thread
}  // namespace

void QueuedWork::wait() {
  // A completed call's queue may be gone with its communicator: only a pending one is looked
  // for there.
  if (queue_ != nullptr && !completed()) queue_->run_here(*this);
  std::unique_lock lock(mutex_);
  completed_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool QueuedWork::wait_for(std::chrono::milliseconds timeout) {
  (void)test();
  std::unique_lock lock(mutex_);
  if (!completed_.wait_for(lock, timeout, [&] { return done_; })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool QueuedWork::test() const {
  if (completed()) return true;
  if (queue_ != nullptr) queue_->start_now(*this);
  return completed();
}

bool QueuedWork::completed() const {
  std::lock_guard lock(mutex_);
  return done_;
}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (thread_.joinable()) ring_now();
  }
  if (thread_.joinable()) thread_.join();
  if (timer_ >= 0) ::close(timer_);
}

WorkPtr WorkQueue::submit(std::string description, std::function<void()> call) {
  auto work = std::make_shared<QueuedWork>(std::move(description), this);
  std::lock_guard lock(mutex_);
  if (timer_ < 0) {
    timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (timer_ < 0) throw std::system_error(errno, std::system_category(), "timerfd_create");
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
  const bool now = eager_ || pending_ > 0;
  const Clock::time_point queued_at = Clock::now();
  queue_.push_back({work, std::move(call), queued_at, now});
  ++pending_;
  if (now)
    ring_now();
  else
    ring_for(queued_at);
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

void WorkQueue::start_now(const QueuedWork& work) {
  std::lock_guard lock(mutex_);
  for (Queued& queued : queue_) {
    if (queued.work.get() != &work) continue;
    if (queued.now) return;
    queued.now = true;
    if (!running_ && &queued == &queue_.front()) ring_now();
    return;
  }
}

std::uint64_t WorkQueue::wakeups() const {
  std::lock_guard lock(mutex_);
  return wakeups_;
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

bool WorkQueue::on_a_progress_thread() {
  return progress_thread;
}

void WorkQueue::drain() {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [&] { return pending_ == 0; });
}

void WorkQueue::serve() {
  serving_queue = this;
  progress_thread = true;
  std::unique_lock lock(mutex_);
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
    if (!running_ && !queue_.empty()) ring_for(queue_.front().queued_at);
    lock.unlock();
    std::uint64_t rang = 0;
    while (::read(timer_, &rang, sizeof rang) < 0 && errno == EINTR) {
    }
    lock.lock();
    ++wakeups_;
    rings_at_ = Clock::time_point::max();
  }
}

void WorkQueue::ring_at(Clock::time_point at) {
  const auto since = at.time_since_epoch();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since);
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(seconds.count());
  when.it_value.tv_nsec = static_cast<long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since - seconds).count());
  // A zero time disarms the timer; a time past rings at once.
  if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) when.it_value.tv_nsec = 1;
  if (::timerfd_settime(timer_, TFD_TIMER_ABSTIME, &when, nullptr) != 0)
    throw std::system_error(errno, std::system_category(), "timerfd_settime");
  rings_at_ = at;
}

void WorkQueue::ring_now() {
  ring_at(Clock::time_point{});
}

void WorkQueue::ring_for(Clock::time_point queued_at) {
  if (rings_at_ == Clock::time_point::max() || rings_at_ < queued_at + claim_window_ / 2)
    ring_at(queued_at + claim_window_);
}

bool WorkQueue::take_front(Queued& next) {
  if (running_ || queue_.empty()) return false;
  Queued& front = queue_.front();
  // A call with others issued behind it is not being waited for either: its caller went on.
  const bool left = queue_.size() > 1 || Clock::now() >= front.queued_at + claim_window_ / 2;
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
  std::lock_guard lock(mutex_);
  running_ = false;
  // A caller's call that ended with nothing behind it leaves the thread asleep.
  if (!queue_.empty() || stopping_) ring_now();
}

}  // namespace arcoll
