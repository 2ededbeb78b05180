// The C API (include/arcoll/arcoll.h) over arcoll::Communicator: each entry point checks its
// arguments and turns exceptions into result codes through c_api_checks.hpp.
#include "arcoll/arcoll.h"

#include <cstring>

#include <string>

#include "arcoll/launch.hpp"
#include "arcoll/local.hpp"
#include "arcoll/memory.hpp"
#include "arcoll/options.hpp"
#include "src/core/c_api_checks.hpp"
#include "src/core/link_costs_source.hpp"

using namespace arcoll::c_api;  // the checks every entry point makes
using arcoll::DataType;
using arcoll::ReduceOp;

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
  return last_error();
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
  return new_handle("arcoll_comm_init_from_env", out, [] { return arcoll::Communicator::from_env(); });
}

arcoll_result_t arcoll_comm_init(arcoll_comm_t** out, int rank, int world_size,
                                 const char* master_addr, int master_port) {
  static constexpr const char* kFunction = "arcoll_comm_init";
  return new_handle(kFunction, out, [&] {
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
    auto comm = std::make_unique<arcoll::Communicator>(launch, arcoll::Options::from_env());
    arcoll::apply_link_costs_sources(*comm);
    return comm;
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

arcoll_result_t arcoll_comm_shrink(arcoll_comm_t* comm, arcoll_comm_t** out) {
  static constexpr const char* kFunction = "arcoll_comm_shrink";
  return new_handle(kFunction, out, [&] { return get(kFunction, comm).shrink(); });
}

arcoll_result_t arcoll_comm_rendezvous_address(const arcoll_comm_t* comm, char* buffer,
                                               size_t size) {
  static constexpr const char* kFunction = "arcoll_comm_rendezvous_address";
  return guarded(kFunction, [&] {
    const std::string address = get(kFunction, comm).rendezvous_address();
    if (address.empty())
      throw arcoll::ConfigurationError(kFunction, "a communicator of one rank has no store");
    if (buffer == nullptr || size <= address.size())
      invalid(kFunction, "the address takes " + std::to_string(address.size() + 1) + " bytes");
    std::memcpy(buffer, address.c_str(), address.size() + 1);
  });
}

arcoll_result_t arcoll_comm_grow(arcoll_comm_t* comm, int wait_for, arcoll_comm_t** out) {
  static constexpr const char* kFunction = "arcoll_comm_grow";
  return new_handle(kFunction, out, [&] { return get(kFunction, comm).grow(wait_for); });
}

arcoll_result_t arcoll_comm_join(const char* address, const char* token, arcoll_comm_t** out) {
  static constexpr const char* kFunction = "arcoll_comm_join";
  return new_handle(kFunction, out, [&] {
    if (address == nullptr || token == nullptr) invalid(kFunction, "a NULL address or token");
    return arcoll::Communicator::join(address, token, arcoll::Options::from_env());
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
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm)
        .iallreduce(send, recv, count, data_type(kFunction, type), reduce_op(kFunction, op));
  });
}

arcoll_result_t arcoll_ireduce_scatter(arcoll_comm_t* comm, const void* send, void* recv,
                                       size_t recv_count, arcoll_datatype_t type, arcoll_op_t op,
                                       arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ireduce_scatter";
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm)
        .ireduce_scatter(send, recv, recv_count, data_type(kFunction, type),
                         reduce_op(kFunction, op));
  });
}

arcoll_result_t arcoll_iallgather(arcoll_comm_t* comm, const void* send, void* recv,
                                  size_t send_count, arcoll_datatype_t type,
                                  arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_iallgather";
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm).iallgather(send, recv, send_count, data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_ibroadcast(arcoll_comm_t* comm, void* buffer, size_t count,
                                  arcoll_datatype_t type, int root, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ibroadcast";
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm).ibroadcast(buffer, count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_ireduce(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                               arcoll_datatype_t type, arcoll_op_t op, int root,
                               arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ireduce";
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm)
        .ireduce(send, recv, count, data_type(kFunction, type), reduce_op(kFunction, op), root);
  });
}

arcoll_result_t arcoll_igather(arcoll_comm_t* comm, const void* send, void* recv,
                               size_t send_count, arcoll_datatype_t type, int root,
                               arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_igather";
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm).igather(send, recv, send_count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_iscatter(arcoll_comm_t* comm, const void* send, void* recv,
                                size_t recv_count, arcoll_datatype_t type, int root,
                                arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_iscatter";
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm).iscatter(send, recv, recv_count, data_type(kFunction, type), root);
  });
}

arcoll_result_t arcoll_ialltoall(arcoll_comm_t* comm, const void* send, void* recv, size_t count,
                                 arcoll_datatype_t type, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ialltoall";
  return new_handle(kFunction, work, [&] {
    return get(kFunction, comm).ialltoall(send, recv, count, data_type(kFunction, type));
  });
}

arcoll_result_t arcoll_ialltoallv(arcoll_comm_t* comm, const void* send, const size_t* send_counts,
                                  const size_t* send_offsets, void* recv,
                                  const size_t* recv_counts, const size_t* recv_offsets,
                                  arcoll_datatype_t type, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ialltoallv";
  return new_handle(kFunction, work, [&] {
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
  return new_handle(kFunction, work, [&] { return get(kFunction, comm).ibarrier(); });
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

arcoll_result_t arcoll_reduce_local(const void* a, const void* b, void* out, size_t count,
                                    arcoll_datatype_t type, arcoll_op_t op) {
  static constexpr const char* kFunction = "arcoll_reduce_local";
  return guarded(kFunction, [&] {
    arcoll::reduce_local(a, b, out, count, data_type(kFunction, type), reduce_op(kFunction, op));
  });
}

arcoll_result_t arcoll_copy_local(void* dst, const void* src, size_t bytes) {
  static constexpr const char* kFunction = "arcoll_copy_local";
  return guarded(kFunction, [&] { arcoll::copy_local(dst, src, bytes); });
}

arcoll_result_t arcoll_mem_alloc(size_t bytes, void** out) {
  static constexpr const char* kFunction = "arcoll_mem_alloc";
  if (out != nullptr) *out = nullptr;
  return guarded(kFunction, [&] {
    if (out == nullptr) invalid(kFunction, "the output pointer is NULL");
    *out = arcoll::mem_alloc(bytes);
  });
}

arcoll_result_t arcoll_mem_free(void* pointer) {
  static constexpr const char* kFunction = "arcoll_mem_free";
  return guarded(kFunction, [&] { arcoll::mem_free(pointer); });
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
  return new_handle(kFunction, out, [&] {
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
    return std::make_unique<arcoll::ParameterServer>(c, o);
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
  return new_handle(kFunction, work, [&] { return get(kFunction, ps).ipush(key, data); });
}

arcoll_result_t arcoll_ps_ipull(arcoll_ps_t* ps, uint64_t key, void* data, arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ps_ipull";
  return new_handle(kFunction, work, [&] { return get(kFunction, ps).ipull(key, data); });
}

arcoll_result_t arcoll_ps_ipush_pull(arcoll_ps_t* ps, uint64_t key, const void* send, void* recv,
                                     arcoll_work_t** work) {
  static constexpr const char* kFunction = "arcoll_ps_ipush_pull";
  return new_handle(kFunction, work, [&] { return get(kFunction, ps).ipush_pull(key, send, recv); });
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
