// The handle of a non-blocking call (Communicator::iallreduce and friends): the call runs on
// the communicator's progress thread, in the order the calls were issued, while the caller
// goes on; the handle says when it is over and how it ended.
//
// Buffers given to a non-blocking call must stay valid and untouched until it completes.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>

namespace arcoll {

class Work {
 public:
  virtual ~Work() = default;

  // Blocks until the call has completed, then throws its error if it failed (an arcoll::Error
  // naming the call). Every call ends within its deadline once it has started, and calls run in
  // order, so this returns; a communicator destroyed meanwhile fails its calls.
  virtual void wait() = 0;
  // As wait(), but gives up after `timeout`: false when the call has not completed by then.
  // The call runs on the progress thread (started at once if it had not started).
  virtual bool wait_for(std::chrono::milliseconds timeout) = 0;
  // Whether the call has completed (succeeded or failed), without blocking; a call that had
  // not started starts at once on the progress thread.
  virtual bool test() const = 0;
  // The call's error once it has failed; null while it runs or after it succeeded.
  virtual std::exception_ptr exception() const = 0;
  // Runs `callback` once the call has completed, on the thread that completed it (the
  // communicator's progress thread, or the thread that waited for the call and ran it; at once
  // on this thread when it has completed already). A callback must not block on this
  // communicator's calls. Waiters wake as the call completes, before its callbacks run: a
  // thread that needs a callback's work done waits for what the callback itself signals.
  virtual void on_completion(std::function<void(const Work&)> callback) = 0;
  // What the call is: "allreduce of 1024 f32", "barrier".
  virtual const std::string& description() const = 0;
};

using WorkPtr = std::shared_ptr<Work>;

}  // namespace arcoll
