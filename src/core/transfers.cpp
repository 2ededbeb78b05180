// Non-blocking sends and receives under MPI's progress rule. Queued behind one another on the
// progress thread, as collectives are, `isend` then `recv` both ways deadlocks once a send
// waits for its receiver (the receive is queued behind it), and so does `irecv` then `send`.
// Here a transfer is posted on the engine at once (after the calls queued ahead of it, which
// keep their order) and left there: every later call's waits move the transports, which move
// it too, and a wait or test of its Work moves the engine itself when no call is running.
#include <algorithm>
#include <chrono>

#include "arcoll/error.hpp"
#include "src/core/calls.hpp"

namespace arcoll {
namespace {

using Clock = std::chrono::steady_clock;

// How long a waiting Work moves the engine before it looks at its own state again.
constexpr auto kMoveSlice = std::chrono::milliseconds(1);

// The Work of a non-blocking transfer: its state is a QueuedWork, completed by whichever thread
// sees the transfer end; waiting or testing moves the engine meanwhile.
class TransferWork final : public Work, public std::enable_shared_from_this<TransferWork> {
 public:
  TransferWork(Communicator::Impl& impl, std::shared_ptr<QueuedWork> state)
      : impl_(impl), state_(std::move(state)) {}

  void wait() override {
    while (!state_->test()) impl_.move_transfers(*state_, Clock::time_point::max());
    state_->wait();
  }
  bool wait_for(std::chrono::milliseconds timeout) override {
    const auto until = Clock::now() + timeout;
    while (!state_->test()) {
      if (Clock::now() >= until) return false;
      impl_.move_transfers(*state_, until);
    }
    state_->wait();
    return true;
  }
  bool test() const override {
    if (!state_->test()) impl_.move_transfers(*state_, Clock::now());
    return state_->test();
  }
  std::exception_ptr exception() const override { return state_->exception(); }
  void on_completion(std::function<void(const Work&)> callback) override {
    // Callers see this Work, not its state; the callback holds it until it has run (its
    // caller may have let go of it), and then lets go (the state drops its callbacks once run).
    state_->on_completion([self = shared_from_this(), callback = std::move(callback)](const Work&) {
      callback(*self);
    });
  }
  const std::string& description() const override { return state_->description(); }

 private:
  Communicator::Impl& impl_;
  std::shared_ptr<QueuedWork> state_;
};

std::string describe_transfer(const Communicator::Impl::Transfer& t, int tag) {
  const bool send = t.kind == Request::Kind::send;
  return std::string(send ? "send of " : "receive of ") + std::to_string(t.bytes) + " B " +
         (send ? "to" : "from") + " rank " + std::to_string(t.peer) + " (tag " +
         std::to_string(tag) + ")";
}

}  // namespace

WorkPtr Communicator::Impl::post_transfer(const char* operation, Transfer transfer, int tag) {
  auto state = std::make_shared<QueuedWork>(describe_transfer(transfer, tag));
  auto work = std::make_shared<TransferWork>(*this, state);
  if (queue_.idle()) {
    {
      std::lock_guard call(call_mutex_);
      post_in_flight(operation, transfer, tag, state);
    }
    end_transfers();
    return work;
  }
  // After the calls queued ahead of it; the queue's own Work ends once it is posted.
  queue_.submit(std::string(operation), [this, operation, transfer, tag, state] {
    {
      std::lock_guard call(call_mutex_);
      post_in_flight(operation, transfer, tag, state);
    }
    end_transfers();
  });
  return work;
}

void Communicator::Impl::post_in_flight(const char* operation, const Transfer& t, int tag,
                                        std::shared_ptr<QueuedWork> work) {
  const std::string what = describe_transfer(t, tag);
  try {
    check_usable([&] { return std::string(operation); });
    engine_->begin({.kind = operation, .chunk_bytes = options_.chunk_bytes}, options_.timeout);
    // Device memory stays there where the peer's transport reads it from the device (shm:
    // CUDA IPC); elsewhere it moves through a host copy, a receive's copied back as it ends.
    std::shared_ptr<char[]> host_copy;
    void* buffer = t.buffer;
    const DeviceMemoryInfo* memory = t.bytes != 0 ? device_memory_of(t.buffer) : nullptr;
    if (memory != nullptr && !engine_->takes_device(t.peer, *memory, t.buffer)) {
      host_copy.reset(new char[t.bytes]);
      if (t.kind == Request::Kind::send) copy_to_host(host_copy.get(), t.buffer, t.bytes);
      buffer = host_copy.get();
      memory = nullptr;
    }
    void* device_recv = t.kind == Request::Kind::recv && host_copy ? t.buffer : nullptr;
    RequestPtr request = engine_->post_tagged(t.kind, t.peer, buffer, t.bytes,
                                              static_cast<std::uint32_t>(tag), memory);
    in_flight_.push_back({std::move(request), std::move(work), what,
                          Clock::now() + options_.timeout, std::move(host_copy), device_recv});
  } catch (const Error&) {
    std::lock_guard lock(ended_mutex_);
    ended_.emplace_back(std::move(work), std::current_exception());
    any_ended_.store(true, std::memory_order_release);
  }
  settle_transfers();
}

void Communicator::Impl::move_transfers(const Work& waiting, Clock::time_point until) {
  const auto slice = std::min(until, Clock::now() + kMoveSlice);
  {
    std::unique_lock call(call_mutex_, std::try_to_lock);
    if (call.owns_lock()) {
      if (!in_flight_.empty() && broken_.empty()) {
        try {
          engine_->progress(slice, Waiting::poll_first);
        } catch (const Error&) {
          // The transports' failure, or an abort: settle_transfers() fails the transfers.
        }
      }
      settle_transfers();
      call.unlock();
      end_transfers();
      return;
    }
  }
  // Another thread's call moves the transports and settles what ended at its end.
  try {
    (void)const_cast<Work&>(waiting).wait_for(
        std::chrono::duration_cast<std::chrono::milliseconds>(kMoveSlice));
  } catch (...) {
  }
}

void Communicator::Impl::settle_transfers() {
  if (in_flight_.empty()) return;
  const auto now = Clock::now();
  std::vector<std::pair<std::shared_ptr<QueuedWork>, std::exception_ptr>> ended;
  std::exception_ptr failure;  // one that breaks the communicator (a timeout)
  std::erase_if(in_flight_, [&](InFlight& f) {
    std::exception_ptr error;
    bool done = false;
    try {
      if (!broken_.empty()) throw PeerError(f.operation, broken_, rank_, f.request->peer);
      done = engine_->test(f.request);
      if (done && f.device_recv != nullptr)
        copy_from_host(f.device_recv, f.host_copy.get(), f.request->bytes);
    } catch (const Error& e) {
      error = make_error(e.code(), f.operation, e.message(), rank_, e.peer());
    }
    if (!done && !error && now >= f.deadline) {
      error = make_error(ErrorCode::timeout, f.operation,
                         "no progress within " + std::to_string(options_.timeout.count() / 1000) +
                             " s (ARCOLL_TIMEOUT): rank " + std::to_string(f.request->peer) +
                             " never matched it",
                         rank_, f.request->peer);
      failure = error;
    }
    if (!done && !error) return false;
    ended.emplace_back(std::move(f.work), error);
    return true;
  });
  if (failure && broken_.empty()) {
    // As a blocking transfer that timed out: the peers are told, later calls fail with it.
    try {
      std::rethrow_exception(failure);
    } catch (const Error& e) {
      broken_ = e.what();
      engine_->abort_links(broken_);
    }
  }
  if (ended.empty()) return;
  std::lock_guard lock(ended_mutex_);
  for (auto& e : ended) ended_.push_back(std::move(e));
  any_ended_.store(true, std::memory_order_release);
}

void Communicator::Impl::end_transfers() {
  if (!any_ended_.load(std::memory_order_acquire)) return;
  std::vector<std::pair<std::shared_ptr<QueuedWork>, std::exception_ptr>> ended;
  {
    std::lock_guard lock(ended_mutex_);
    ended.swap(ended_);
    any_ended_.store(false, std::memory_order_relaxed);
  }
  for (auto& [work, error] : ended) work->complete(std::move(error));
}

}  // namespace arcoll
