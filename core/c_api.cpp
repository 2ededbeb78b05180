// The C API (include/arcoll/arcoll.h) over arcoll::Communicator. Every entry point catches
// every exception: arcoll::Error keeps its code, std::bad_alloc becomes ARCOLL_ERROR_SYSTEM
// and anything else ARCOLL_ERROR_INTERNAL; the message goes to the thread's last error.
#include "arcoll/arcoll.h"

#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/options.hpp"
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

namespace {

using arcoll::DataType;
using arcoll::ErrorCode;
using arcoll::ReduceOp;

// The C values are part of the ABI: they must match the C++ enums one for one.
static_assert(ARCOLL_F32 == static_cast<int>(DataType::f32));
static_assert(ARCOLL_F64 == static_cast<int>(DataType::f64));
static_assert(ARCOLL_F16 == static_cast<int>(DataType::f16));
static_assert(ARCOLL_BF16 == static_cast<int>(DataType::bf16));
static_assert(ARCOLL_I8 == static_cast<int>(DataType::i8));
static_assert(ARCOLL_U8 == static_cast<int>(DataType::u8));
static_assert(ARCOLL_I32 == static_cast<int>(DataType::i32));
static_assert(ARCOLL_I64 == static_cast<int>(DataType::i64));
static_assert(std::size(arcoll::kAllDataTypes) == 8);

static_assert(ARCOLL_SUM == static_cast<int>(ReduceOp::sum));
static_assert(ARCOLL_PROD == static_cast<int>(ReduceOp::prod));
static_assert(ARCOLL_MIN == static_cast<int>(ReduceOp::min));
static_assert(ARCOLL_MAX == static_cast<int>(ReduceOp::max));
static_assert(ARCOLL_AVG == static_cast<int>(ReduceOp::avg));
static_assert(std::size(arcoll::kAllReduceOps) == 5);

static_assert(ARCOLL_SUCCESS == static_cast<int>(ErrorCode::ok));
static_assert(ARCOLL_ERROR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
static_assert(ARCOLL_ERROR_TIMEOUT == static_cast<int>(ErrorCode::timeout));
static_assert(ARCOLL_ERROR_PEER_FAILURE == static_cast<int>(ErrorCode::peer_failure));
static_assert(ARCOLL_ERROR_PROTOCOL == static_cast<int>(ErrorCode::protocol));
static_assert(ARCOLL_ERROR_SYSTEM == static_cast<int>(ErrorCode::system));
static_assert(ARCOLL_ERROR_CONFIGURATION == static_cast<int>(ErrorCode::configuration));
static_assert(ARCOLL_ERROR_INTERNAL == static_cast<int>(ErrorCode::internal));

constexpr const char kErrorLost[] = "arcoll: out of memory while recording the error message";

// The last failure on this thread; see arcoll_last_error().
thread_local std::string last_error_text;
thread_local const char* last_error = "";

// Records a failure and returns its code. Never throws.
arcoll_result_t fail(arcoll_result_t code, std::string_view text, std::string_view more = {},
                     std::string_view detail = {}) {
  try {
    last_error_text.assign(text);
    last_error_text.append(more);
    last_error_text.append(detail);
    last_error = last_error_text.c_str();
  } catch (...) {
    last_error = kErrorLost;
  }
  return code;
}

arcoll_result_t to_result(ErrorCode code) {
  const int value = static_cast<int>(code);
  // An exception never means success; an unknown code is our bug.
  if (value <= ARCOLL_SUCCESS || value > ARCOLL_ERROR_INTERNAL) return ARCOLL_ERROR_INTERNAL;
  return static_cast<arcoll_result_t>(value);
}

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

[[noreturn]] void invalid(const char* function, std::string message) {
  throw arcoll::InvalidArgument(function, std::move(message));
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

arcoll::Communicator& get(const char* function, const arcoll_comm_t* comm) {
  if (comm == nullptr) invalid(function, "the communicator is NULL");
  if (!live_handles<arcoll_comm>().contains(comm))
    invalid(function,
            "not a live communicator: destroyed already, or not made by arcoll_comm_init*");
  return *comm->impl;
}

arcoll::Work& get(const char* function, const arcoll_work_t* work) {
  if (work == nullptr) invalid(function, "the work handle is NULL");
  if (!live_handles<arcoll_work>().contains(work))
    invalid(function, "not a live work handle: freed already, or not made by arcoll_i*");
  return *work->impl;
}

arcoll::ParameterServer& get(const char* function, const arcoll_ps_t* ps) {
  if (ps == nullptr) invalid(function, "the parameter server is NULL");
  if (!live_handles<arcoll_ps>().contains(ps))
    invalid(function, "not a live parameter server: destroyed already, or not made by "
                      "arcoll_ps_create");
  return *ps->impl;
}

// A non-blocking call: `issue` checks and queues it; *out gets its handle (NULL on failure).
template <class Issue>
arcoll_result_t issue(const char* function, arcoll_work_t** out, Issue&& issue_call) noexcept {
  if (out == nullptr)
    return fail(ARCOLL_ERROR_INVALID_ARGUMENT, function, ": the work output pointer is NULL");
  *out = nullptr;
  return guarded(function, [&] {
    auto work = std::make_unique<arcoll_work>();
    work->impl = issue_call();
    live_handles<arcoll_work>().add(work.get());
    *out = work.release();
  });
}

// The result of a completed call's error (null: success), recorded as this thread's last error.
arcoll_result_t result_of(const std::exception_ptr& error) noexcept {
  if (!error) return ARCOLL_SUCCESS;
  return guarded("arcoll_work_wait", [&] { std::rethrow_exception(error); });
}

// Count and offset arrays of an all-to-all-v: size() entries each.
std::span<const std::size_t> per_rank(const char* function, const arcoll::Communicator& comm,
                                      const size_t* values, const char* name) {
  if (values == nullptr) invalid(function, std::string(name) + " is NULL");
  return {values, static_cast<std::size_t>(comm.size())};
}

DataType data_type(const char* function, arcoll_datatype_t type) {
  const int value = static_cast<int>(type);
  if (value < ARCOLL_F32 || value > ARCOLL_I64)
    invalid(function, std::to_string(value) + " is not an arcoll_datatype_t");
  return static_cast<DataType>(value);
}

ReduceOp reduce_op(const char* function, arcoll_op_t op) {
  const int value = static_cast<int>(op);
  if (value < ARCOLL_SUM || value > ARCOLL_AVG)
    invalid(function, std::to_string(value) + " is not an arcoll_op_t");
  return static_cast<ReduceOp>(value);
}

// A getter: validates the out pointer, then stores the value.
template <class Getter>
arcoll_result_t query(const char* function, const arcoll_comm_t* comm, int* out, Getter getter) {
  return guarded(function, [&] {
    const arcoll::Communicator& c = get(function, comm);
    if (out == nullptr) invalid(function, "the output pointer is NULL");
    *out = getter(c);
  });
}

arcoll_result_t create(const char* function, arcoll_comm_t** out,
                       const std::function<std::unique_ptr<arcoll::Communicator>()>& make) {
  if (out == nullptr)
    return fail(ARCOLL_ERROR_INVALID_ARGUMENT, function, ": the output pointer is NULL");
  *out = nullptr;
  return guarded(function, [&] {
    auto comm = std::make_unique<arcoll_comm>();
    comm->impl = make();
    live_handles<arcoll_comm>().add(comm.get());
    *out = comm.release();
  });
}

}  // namespace

extern "C" {

const char* arcoll_result_string(arcoll_result_t result) {
  switch (result) {
    case ARCOLL_SUCCESS:
      return "success";
    case ARCOLL_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case ARCOLL_ERROR_TIMEOUT:
      return "timeout";
    case ARCOLL_ERROR_PEER_FAILURE:
      return "peer failure";
    case ARCOLL_ERROR_PROTOCOL:
      return "protocol error";
    case ARCOLL_ERROR_SYSTEM:
      return "system error";
    case ARCOLL_ERROR_CONFIGURATION:
      return "configuration error";
    case ARCOLL_ERROR_INTERNAL:
      return "internal error";
  }
  return "unknown result";
}

const char* arcoll_last_error(void) {
  return last_error;
}

const char* arcoll_version(void) {
  try {
    static const std::string version(arcoll::version());
    return version.c_str();
  } catch (...) {
    return "unknown";
  }
}

size_t arcoll_datatype_size(arcoll_datatype_t type) {
  const int value = static_cast<int>(type);
  if (value < ARCOLL_F32 || value > ARCOLL_I64) return 0;
  return arcoll::size_of(static_cast<DataType>(value));
}

arcoll_result_t arcoll_comm_init_from_env(arcoll_comm_t** out) {
  return create("arcoll_comm_init_from_env", out, [] { return arcoll::Communicator::from_env(); });
}

arcoll_result_t arcoll_comm_init(arcoll_comm_t** out, int rank, int world_size,
                                 const char* master_addr, int master_port) {
  static constexpr const char* kFunction = "arcoll_comm_init";
  return create(kFunction, out, [&] {
    if (world_size < 1)
      invalid(kFunction, "world size " + std::to_string(world_size) + " is below 1");
    if (rank < 0 || rank >= world_size)
      invalid(kFunction,
              "rank " + std::to_string(rank) + " is outside 0.." + std::to_string(world_size - 1));
    if (world_size > 1 && (master_addr == nullptr || *master_addr == '\0'))
      invalid(kFunction, "a world of " + std::to_string(world_size) +
                             " ranks needs master_addr, the host of rank 0's store");
    if (master_port < (world_size > 1 ? 1 : 0) || master_port > 65535)
      invalid(kFunction, "master port " + std::to_string(master_port) + " is not a TCP port");
    arcoll::LaunchInfo launch;
    launch.rank = rank;
    launch.world_size = world_size;
    launch.master_addr = master_addr != nullptr ? master_addr : "";
    launch.master_port = master_port;
    launch.source = "explicit";
    const arcoll::Options options = arcoll::Options::from_env();
    return std::make_unique<arcoll::Communicator>(launch, options);
  });
}

arcoll_result_t arcoll_comm_destroy(arcoll_comm_t* comm) {
  if (comm == nullptr) return ARCOLL_SUCCESS;
  if (!live_handles<arcoll_comm>().remove(comm))
    return fail(ARCOLL_ERROR_INVALID_ARGUMENT,
                "arcoll_comm_destroy: not a live communicator: destroyed already, or not made "
                "by arcoll_comm_init*");
  // The destructor is noexcept: leaving the job never fails from the caller's point of view.
  delete comm;
  return ARCOLL_SUCCESS;
}

arcoll_result_t arcoll_comm_set_timeout(arcoll_comm_t* comm, double seconds) {
  static constexpr const char* kFunction = "arcoll_comm_set_timeout";
  return guarded(kFunction, [&] {
    arcoll::Communicator& c = get(kFunction, comm);
    if (!(seconds > 0) || seconds > 1e9)
      invalid(kFunction, "the timeout must be a positive number of seconds");
    c.set_timeout(std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0 + 0.5)));
  });
}

arcoll_result_t arcoll_comm_abort(arcoll_comm_t* comm, const char* reason) {
  static constexpr const char* kFunction = "arcoll_comm_abort";
  return guarded(kFunction, [&] {
    get(kFunction, comm).abort(reason != nullptr ? reason : "no reason given");
  });
}

arcoll_result_t arcoll_comm_rank(const arcoll_comm_t* comm, int* rank) {
  return query("arcoll_comm_rank", comm, rank, [](const auto& c) { return c.rank(); });
}

arcoll_result_t arcoll_comm_size(const arcoll_comm_t* comm, int* size) {
  return query("arcoll_comm_size", comm, size, [](const auto& c) { return c.size(); });
}

arcoll_result_t arcoll_comm_local_rank(const arcoll_comm_t* comm, int* local_rank) {
  return query("arcoll_comm_local_rank", comm, local_rank,
               [](const auto& c) { return c.local_rank(); });
}

arcoll_result_t arcoll_comm_local_size(const arcoll_comm_t* comm, int* local_size) {
  return query("arcoll_comm_local_size", comm, local_size,
               [](const auto& c) { return c.local_size(); });
}

arcoll_result_t arcoll_comm_node_id(const arcoll_comm_t* comm, int* node_id) {
  return query("arcoll_comm_node_id", comm, node_id, [](const auto& c) { return c.node_id(); });
}

arcoll_result_t arcoll_comm_node_count(const arcoll_comm_t* comm, int* node_count) {
  return query("arcoll_comm_node_count", comm, node_count,
               [](const auto& c) { return c.node_count(); });
}

arcoll_result_t arcoll_allreduce(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                                 arcoll_datatype_t type, arcoll_op_t op) {
  static constexpr const char* kFunction = "arcoll_allreduce";
  return guarded(kFunction, [&] {
    get(kFunction, comm)
        .allreduce(send, recv, count, data_type(kFunction, type), reduce_op(kFunction, op));
  });
}

arcoll_result_t arcoll_reduce_scatter(arcoll_comm_t* comm, const void* send, void* recv,
                                      size_t recv_count, arcoll_datatype_t type, arcoll_op_t op) {
  static constexpr const char* kFunction = "arcoll_reduce_scatter";
  return guarded(kFunction, [&] {
    get(kFunction, comm)
        .reduce_scatter(send, recv, recv_count, data_type(kFunction, type),
                        reduce_op(kFunction, op));
  });
}

arcoll_result_t arcoll_allgather(arcoll_comm_t* comm, const void* send, void* recv,
                                 size_t send_count, arcoll_datatype_t type) {
  static constexpr const char* kFunction = "arcoll_allgather";
  return guarded(kFunction, [&] {
    get(kFunction, comm).allgather(send, recv, send_count, data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_broadcast(arcoll_comm_t* comm, void* buffer, size_t count,
                                 arcoll_datatype_t type, int root) {
  static constexpr const char* kFunction = "arcoll_broadcast";
  return guarded(kFunction, [&] {
    get(kFunction, comm).broadcast(buffer, count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_barrier(arcoll_comm_t* comm) {
  static constexpr const char* kFunction = "arcoll_barrier";
  return guarded(kFunction, [&] { get(kFunction, comm).barrier(); });
}

arcoll_result_t arcoll_reduce(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                              arcoll_datatype_t type, arcoll_op_t op, int root) {
  static constexpr const char* kFunction = "arcoll_reduce";
  return guarded(kFunction, [&] {
    get(kFunction, comm)
        .reduce(send, recv, count, data_type(kFunction, type), reduce_op(kFunction, op), root);
  });
}

arcoll_result_t arcoll_gather(arcoll_comm_t* comm, const void* send, void* recv, size_t send_count,
                              arcoll_datatype_t type, int root) {
  static constexpr const char* kFunction = "arcoll_gather";
  return guarded(kFunction, [&] {
    get(kFunction, comm).gather(send, recv, send_count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_scatter(arcoll_comm_t* comm, const void* send, void* recv,
                               size_t recv_count, arcoll_datatype_t type, int root) {
  static constexpr const char* kFunction = "arcoll_scatter";
  return guarded(kFunction, [&] {
    get(kFunction, comm).scatter(send, recv, recv_count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_alltoall(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                                arcoll_datatype_t type) {
  static constexpr const char* kFunction = "arcoll_alltoall";
  return guarded(kFunction, [&] {
    get(kFunction, comm).alltoall(send, recv, count, data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_alltoallv(arcoll_comm_t* comm, const void* send, const size_t* send_counts,
                                 const size_t* send_offsets, void* recv, const size_t* recv_counts,
                                 const size_t* recv_offsets, arcoll_datatype_t type) {
  static constexpr const char* kFunction = "arcoll_alltoallv";
  return guarded(kFunction, [&] {
    arcoll::Communicator& c = get(kFunction, comm);
    c.alltoallv(send, per_rank(kFunction, c, send_counts, "send_counts"),
                per_rank(kFunction, c, send_offsets, "send_offsets"), recv,
                per_rank(kFunction, c, recv_counts, "recv_counts"),
                per_rank(kFunction, c, recv_offsets, "recv_offsets"), data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_iallreduce(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                                  arcoll_datatype_t type, arcoll_op_t op, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_iallreduce";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm)
        .iallreduce(send, recv, count, data_type(kFunction, type), reduce_op(kFunction, op));
  });
}

arcoll_result_t arcoll_ireduce_scatter(arcoll_comm_t* comm, const void* send, void* recv,
                                       size_t recv_count, arcoll_datatype_t type, arcoll_op_t op,
                                       arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ireduce_scatter";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm)
        .ireduce_scatter(send, recv, recv_count, data_type(kFunction, type),
                         reduce_op(kFunction, op));
  });
}

arcoll_result_t arcoll_iallgather(arcoll_comm_t* comm, const void* send, void* recv,
                                  size_t send_count, arcoll_datatype_t type,
                                  arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_iallgather";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm).iallgather(send, recv, send_count, data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_ibroadcast(arcoll_comm_t* comm, void* buffer, size_t count,
                                  arcoll_datatype_t type, int root, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ibroadcast";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm).ibroadcast(buffer, count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_ireduce(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                               arcoll_datatype_t type, arcoll_op_t op, int root,
                               arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ireduce";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm)
        .ireduce(send, recv, count, data_type(kFunction, type), reduce_op(kFunction, op), root);
  });
}

arcoll_result_t arcoll_igather(arcoll_comm_t* comm, const void* send, void* recv,
                               size_t send_count, arcoll_datatype_t type, int root,
                               arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_igather";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm).igather(send, recv, send_count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_iscatter(arcoll_comm_t* comm, const void* send, void* recv,
                                size_t recv_count, arcoll_datatype_t type, int root,
                                arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_iscatter";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm).iscatter(send, recv, recv_count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_ialltoall(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                                 arcoll_datatype_t type, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ialltoall";
  return issue(kFunction, work, [&] {
    return get(kFunction, comm).ialltoall(send, recv, count, data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_ialltoallv(arcoll_comm_t* comm, const void* send, const size_t* send_counts,
                                  const size_t* send_offsets, void* recv,
                                  const size_t* recv_counts, const size_t* recv_offsets,
                                  arcoll_datatype_t type, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ialltoallv";
  return issue(kFunction, work, [&] {
    arcoll::Communicator& c = get(kFunction, comm);
    return c.ialltoallv(send, per_rank(kFunction, c, send_counts, "send_counts"),
                        per_rank(kFunction, c, send_offsets, "send_offsets"), recv,
                        per_rank(kFunction, c, recv_counts, "recv_counts"),
                        per_rank(kFunction, c, recv_offsets, "recv_offsets"),
                        data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_ibarrier(arcoll_comm_t* comm, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ibarrier";
  return issue(kFunction, work, [&] { return get(kFunction, comm).ibarrier(); });
}

arcoll_result_t arcoll_work_wait(arcoll_work_t* work) {
  static constexpr const char* kFunction = "arcoll_work_wait";
  std::exception_ptr error;
  const arcoll_result_t checked = guarded(kFunction, [&] {
    arcoll::Work& w = get(kFunction, work);
    try {
      w.wait();
    } catch (...) {
      error = std::current_exception();
    }
  });
  return checked != ARCOLL_SUCCESS ? checked : result_of(error);
}

arcoll_result_t arcoll_work_test(arcoll_work_t* work, int* done) {
  static constexpr const char* kFunction = "arcoll_work_test";
  return guarded(kFunction, [&] {
    const arcoll::Work& w = get(kFunction, work);
    if (done == nullptr) invalid(kFunction, "the output pointer is NULL");
    *done = w.test() ? 1 : 0;
  });
}

arcoll_result_t arcoll_work_on_completion(arcoll_work_t* work,
                                          void (*callback)(void* user, arcoll_result_t result),
                                          void* user) {
  static constexpr const char* kFunction = "arcoll_work_on_completion";
  return guarded(kFunction, [&] {
    arcoll::Work& w = get(kFunction, work);
    if (callback == nullptr) invalid(kFunction, "the callback is NULL");
    w.on_completion(
        [callback, user](const arcoll::Work& done) { callback(user, result_of(done.exception())); });
  });
}

arcoll_result_t arcoll_work_free(arcoll_work_t* work) {
  if (work == nullptr) return ARCOLL_SUCCESS;
  if (!live_handles<arcoll_work>().remove(work))
    return fail(ARCOLL_ERROR_INVALID_ARGUMENT,
                "arcoll_work_free: not a live work handle: freed already, or not made by "
                "arcoll_i*");
  delete work;
  return ARCOLL_SUCCESS;
}

arcoll_result_t arcoll_send(arcoll_comm_t* comm, const void* buffer, size_t bytes, int peer,
                            int tag) {
  static constexpr const char* kFunction = "arcoll_send";
  return guarded(kFunction, [&] { get(kFunction, comm).send(buffer, bytes, peer, tag); });
}

arcoll_result_t arcoll_recv(arcoll_comm_t* comm, void* buffer, size_t bytes, int peer, int tag) {
  static constexpr const char* kFunction = "arcoll_recv";
  return guarded(kFunction, [&] { get(kFunction, comm).recv(buffer, bytes, peer, tag); });
}

void arcoll_ps_options_init(arcoll_ps_options_t* options) {
  if (options == nullptr) return;
  const arcoll::ParameterServerOptions defaults;
  *options = {};
  options->piece_bytes = defaults.piece_bytes;
  options->consistency = ARCOLL_BSP;
  options->rule = ARCOLL_RULE_SUM;
  options->learning_rate = defaults.learning_rate;
  options->momentum = defaults.momentum;
}

arcoll_result_t arcoll_ps_create(arcoll_comm_t* comm, const arcoll_ps_options_t* options,
                                 arcoll_ps_t** out) {
  static constexpr const char* kFunction = "arcoll_ps_create";
  if (out == nullptr)
    return fail(ARCOLL_ERROR_INVALID_ARGUMENT, kFunction, ": the output pointer is NULL");
  *out = nullptr;
  return guarded(kFunction, [&] {
    arcoll::Communicator& c = get(kFunction, comm);
    if (options == nullptr) invalid(kFunction, "the options are NULL (arcoll_ps_options_init)");
    if (options->server_count > 0 && options->server_ranks == nullptr)
      invalid(kFunction, "server_count is not 0 but server_ranks is NULL");
    const int consistency = static_cast<int>(options->consistency);
    if (consistency < ARCOLL_BSP || consistency > ARCOLL_SSP)
      invalid(kFunction, std::to_string(consistency) + " is not an arcoll_consistency_t");
    const int rule = static_cast<int>(options->rule);
    if (rule < ARCOLL_RULE_SUM || rule > ARCOLL_RULE_SGD)
      invalid(kFunction, std::to_string(rule) + " is not an arcoll_server_rule_t");
    arcoll::ParameterServerOptions o;
    o.server_ranks.assign(options->server_ranks, options->server_ranks + options->server_count);
    o.piece_bytes = options->piece_bytes;
    o.consistency = static_cast<arcoll::Consistency>(consistency);
    o.staleness = options->staleness;
    o.rule = static_cast<arcoll::ServerRule>(rule);
    o.learning_rate = options->learning_rate;
    o.momentum = options->momentum;
    auto ps = std::make_unique<arcoll_ps>();
    ps->impl = std::make_unique<arcoll::ParameterServer>(c, o);
    live_handles<arcoll_ps>().add(ps.get());
    *out = ps.release();
  });
}

arcoll_result_t arcoll_ps_destroy(arcoll_ps_t* ps) {
  if (ps == nullptr) return ARCOLL_SUCCESS;
  if (!live_handles<arcoll_ps>().remove(ps))
    return fail(ARCOLL_ERROR_INVALID_ARGUMENT,
                "arcoll_ps_destroy: not a live parameter server: destroyed already, or not made "
                "by arcoll_ps_create");
  return guarded("arcoll_ps_destroy", [&] { delete ps; });
}

arcoll_result_t arcoll_ps_is_worker(const arcoll_ps_t* ps, int* is_worker) {
  static constexpr const char* kFunction = "arcoll_ps_is_worker";
  return guarded(kFunction, [&] {
    const arcoll::ParameterServer& p = get(kFunction, ps);
    if (is_worker == nullptr) invalid(kFunction, "the output pointer is NULL");
    *is_worker = p.is_worker() ? 1 : 0;
  });
}

arcoll_result_t arcoll_ps_serve(arcoll_ps_t* ps) {
  static constexpr const char* kFunction = "arcoll_ps_serve";
  return guarded(kFunction, [&] { get(kFunction, ps).serve(); });
}

arcoll_result_t arcoll_ps_register(arcoll_ps_t* ps, uint64_t key, size_t count,
                                   arcoll_datatype_t type, const void* initial) {
  static constexpr const char* kFunction = "arcoll_ps_register";
  return guarded(kFunction, [&] {
    get(kFunction, ps).register_tensor(key, count, data_type(kFunction, type), initial);
  });
}

arcoll_result_t arcoll_ps_ipush(arcoll_ps_t* ps, uint64_t key, const void* data,
                                arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ps_ipush";
  return issue(kFunction, work, [&] { return get(kFunction, ps).ipush(key, data); });
}

arcoll_result_t arcoll_ps_ipull(arcoll_ps_t* ps, uint64_t key, void* data, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ps_ipull";
  return issue(kFunction, work, [&] { return get(kFunction, ps).ipull(key, data); });
}

arcoll_result_t arcoll_ps_ipush_pull(arcoll_ps_t* ps, uint64_t key, const void* send, void* recv,
                                     arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ps_ipush_pull";
  return issue(kFunction, work, [&] { return get(kFunction, ps).ipush_pull(key, send, recv); });
}

arcoll_result_t arcoll_ps_barrier(arcoll_ps_t* ps) {
  static constexpr const char* kFunction = "arcoll_ps_barrier";
  return guarded(kFunction, [&] { get(kFunction, ps).barrier(); });
}

arcoll_result_t arcoll_ps_finish(arcoll_ps_t* ps) {
  static constexpr const char* kFunction = "arcoll_ps_finish";
  return guarded(kFunction, [&] { get(kFunction, ps).finish(); });
}

}  // extern "C"
