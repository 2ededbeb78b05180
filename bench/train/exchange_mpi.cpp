// MPI_Allreduce in the same buckets, the Caffe-MPI and Horovod-MPI pattern: a background
// thread runs the blocking all-reduces in the order they were started (Open MPI progresses a
// non-blocking collective only inside MPI calls, so MPI_Iallreduce would not overlap
// backward). The ranks are mpirun's; main() asked for MPI_THREAD_SERIALIZED.
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "exchange.hpp"

namespace arbench::train {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + text);
}

class MpiExchange final : public GradientExchange {
 public:
  explicit MpiExchange(std::chrono::milliseconds timeout) : timeout_(timeout) {
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    worker_ = std::thread([this] { serve(); });
  }
  ~MpiExchange() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    // A call that never returned keeps its thread; the process is going down with an error.
    if (stuck_) {
      worker_.detach();
      return;
    }
    worker_.join();
    MPI_Comm_free(&comm_);
  }
  std::string description() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version, std::strlen(version));
    return "MPI_Allreduce on a background thread (" + text.substr(0, text.find(',')) + ")";
  }
  Pending start_sum(float* data, std::size_t count) override {
    return submit("MPI_Allreduce of " + std::to_string(count) + " floats", [this, data, count] {
      check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm_),
            "MPI_Allreduce");
    });
  }
  void broadcast(float* data, std::size_t count, int root) override {
    submit("MPI_Bcast of " + std::to_string(count) + " floats", [this, data, count, root] {
      check(MPI_Bcast(data, static_cast<int>(count), MPI_FLOAT, root, comm_), "MPI_Bcast");
    })();
  }

 private:
  // Queues `call` for the worker; the returned wait gives up after the timeout.
  Pending submit(std::string what, std::function<void()> call) {
    auto task = std::make_shared<std::packaged_task<void()>>(std::move(call));
    std::shared_future<void> done = task->get_future().share();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(task);
    }
    wake_.notify_one();
    return [this, done, what = std::move(what)] {
      if (done.wait_for(timeout_) != std::future_status::ready) {
        stuck_ = true;
        throw std::runtime_error(what + " did not complete within " +
                                 std::to_string(timeout_.count() / 1000.0) +
                                 " s: a rank died or hangs");
      }
      done.get();
    };
  }
  void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      (*task)();
      lock.lock();
    }
  }

  std::chrono::milliseconds timeout_;
  std::atomic<bool> stuck_{false};
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<std::packaged_task<void()>>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

const ExchangeRegistrar kMpi({"mpi", "MPI_Allreduce (Open MPI), ranks started by mpirun", true,
                              true, nullptr, [](const ExchangeSetup& setup) {
                                return std::make_unique<MpiExchange>(setup.timeout);
                              }});

}  // namespace
}  // namespace arbench::train
