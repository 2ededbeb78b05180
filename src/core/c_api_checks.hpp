// What every entry point of the C API (c_api.cpp) shares: the handles, the checks of their
// arguments, and the turning of exceptions into result codes. Every entry point catches
// every exception: arcoll::Error keeps its code, std::bad_alloc becomes ARCOLL_ERROR_SYSTEM
// and anything else ARCOLL_ERROR_INTERNAL; the message goes to the thread's last error.
#pragma once

#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "arcoll/arcoll.h"
#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/parameter_server.hpp"
#include "arcoll/types.hpp"
#include "arcoll/work.hpp"

struct arcoll_comm {
  std::unique_ptr<arcoll::Communicator> impl;
};

struct arcoll_work {
  arcoll::WorkPtr impl;
};

struct arcoll_ps {
  std::unique_ptr<arcoll::ParameterServer> impl;
};

namespace arcoll::c_api {

// Records a failure and returns its code. Never throws.
arcoll_result_t fail(arcoll_result_t code, std::string_view text, std::string_view more = {},
                     std::string_view detail = {});
// The thread's last failure (arcoll_last_error).
const char* last_error();
arcoll_result_t to_result(ErrorCode code);
[[noreturn]] void invalid(const char* function, std::string message);

// Runs `body`, turning any exception into a result code and a last-error message.
template <class Body>
arcoll_result_t guarded(const char* function, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return ARCOLL_SUCCESS;
  } catch (const arcoll::Error& e) {
    return fail(to_result(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return fail(ARCOLL_ERROR_SYSTEM, function, ": out of memory");
  } catch (const std::exception& e) {
    return fail(ARCOLL_ERROR_INTERNAL, function, ": unexpected error: ", e.what());
  } catch (...) {
    return fail(ARCOLL_ERROR_INTERNAL, function, ": unknown exception");
  }
}

// The handles arcoll made and has not freed: a call with any other pointer (freed, or never
// ours) is an error instead of a use after free. A freed handle whose address a later one
// reuses is live again: the check catches stale handles, not every one.
template <class Handle>
class LiveHandles {
 public:
  void add(const Handle* handle) {
    std::lock_guard lock(mutex_);
    handles_.insert(handle);
  }
  bool remove(const Handle* handle) {
    std::lock_guard lock(mutex_);
    return handles_.erase(handle) == 1;
  }
  bool contains(const Handle* handle) const {
    std::lock_guard lock(mutex_);
    return handles_.count(handle) == 1;
  }

 private:
  mutable std::mutex mutex_;
  std::set<const Handle*> handles_;
};

template <class Handle>
LiveHandles<Handle>& live_handles() {
  static LiveHandles<Handle> handles;
  return handles;
}

// The object behind a live handle; InvalidArgument naming `function` for NULL or a handle
// that is not live.
arcoll::Communicator& get(const char* function, const arcoll_comm_t* comm);
arcoll::Work& get(const char* function, const arcoll_work_t* work);
arcoll::ParameterServer& get(const char* function, const arcoll_ps_t* ps);

// A new live handle into *out (NULL on failure) holding what `make` returns: a communicator,
// a parameter server, or the work of a non-blocking call that `make` checks and queues.
template <class Handle, class Make>
arcoll_result_t new_handle(const char* function, Handle** out, Make&& make) noexcept {
  if (out == nullptr)
    return fail(ARCOLL_ERROR_INVALID_ARGUMENT, function, ": the output pointer is NULL");
  *out = nullptr;
  return guarded(function, [&] {
    auto handle = std::make_unique<Handle>();
    handle->impl = make();
    live_handles<Handle>().add(handle.get());
    *out = handle.release();
  });
}

// The result of a completed call's error (null: success), recorded as this thread's last error.
arcoll_result_t result_of(const std::exception_ptr& error) noexcept;
// Count and offset arrays of an all-to-all-v: size() entries each.
std::span<const std::size_t> per_rank(const char* function, const arcoll::Communicator& comm,
                                      const size_t* values, const char* name);
DataType data_type(const char* function, arcoll_datatype_t type);
ReduceOp reduce_op(const char* function, arcoll_op_t op);

// A getter: validates the out pointer, then stores the value.
template <class Getter>
arcoll_result_t query(const char* function, const arcoll_comm_t* comm, int* out, Getter getter) {
  return guarded(function, [&] {
    const arcoll::Communicator& c = get(function, comm);
    if (out == nullptr) invalid(function, "the output pointer is NULL");
    *out = getter(c);
  });
}

}  // namespace arcoll::c_api
