/* The arcoll C API, for framework plugins and other non-C++ callers.
 *
 * A thin layer over arcoll::Communicator (arcoll/communicator.hpp) with the same semantics:
 * every rank calls the same collectives in the same order, a communicator is used by one
 * thread at a time, and every blocking call honours the timeout (ARCOLL_TIMEOUT) instead of
 * hanging.
 *
 * Every function that can fail returns an arcoll_result_t; no C++ exception ever crosses this
 * interface. On failure arcoll_last_error() gives the full message (what failed, on which rank,
 * with which peer, and what to do about it).
 *
 * Valid in C11 and C++.
 */
#ifndef ARCOLL_ARCOLL_H_
#define ARCOLL_ARCOLL_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define ARCOLL_C_API __attribute__((visibility("default")))
#else
#define ARCOLL_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A communicator: a group of ranks that run collectives together. Opaque. */
typedef struct arcoll_comm arcoll_comm_t;

/* A non-blocking call in flight (arcoll_i*): wait for it, test it, free it. Opaque. */
typedef struct arcoll_work arcoll_work_t;

/* Element types. Values equal those of arcoll::DataType. */
typedef enum arcoll_datatype {
  ARCOLL_F32 = 0,
  ARCOLL_F64 = 1,
  ARCOLL_F16 = 2,  /* IEEE 754 binary16 */
  ARCOLL_BF16 = 3, /* bfloat16 */
  ARCOLL_I8 = 4,
  ARCOLL_U8 = 5,
  ARCOLL_I32 = 6,
  ARCOLL_I64 = 7,
  /* Not a type: makes every int (negative ones too) a valid value of the enum, so that a
   * caller's out-of-range value reaches arcoll's check (ARCOLL_ERROR_INVALID_ARGUMENT)
   * instead of undefined behaviour. */
  ARCOLL_DATATYPE_RANGE = -2147483647 - 1
} arcoll_datatype_t;

/* Reduction operators. Values equal those of arcoll::ReduceOp.
 * ARCOLL_AVG divides the sum by the world size and is defined for floating types only; on an
 * integer type it fails with ARCOLL_ERROR_INVALID_ARGUMENT. */
typedef enum arcoll_op {
  ARCOLL_SUM = 0,
  ARCOLL_PROD = 1,
  ARCOLL_MIN = 2,
  ARCOLL_MAX = 3,
  ARCOLL_AVG = 4,
  ARCOLL_OP_RANGE = -2147483647 - 1 /* not an operator: see ARCOLL_DATATYPE_RANGE */
} arcoll_op_t;

/* Result codes. Values equal those of arcoll::ErrorCode. */
typedef enum arcoll_result {
  ARCOLL_SUCCESS = 0,
  ARCOLL_ERROR_INVALID_ARGUMENT = 1, /* bad call: NULL pointer, unsupported type/op, bad rank */
  ARCOLL_ERROR_TIMEOUT = 2,          /* a deadline expired waiting for a peer */
  ARCOLL_ERROR_PEER_FAILURE = 3,     /* a peer closed its connection, crashed or aborted */
  ARCOLL_ERROR_PROTOCOL = 4,         /* malformed or unexpected bytes from a peer or the store */
  ARCOLL_ERROR_SYSTEM = 5,           /* an operating-system call failed, or out of memory */
  ARCOLL_ERROR_CONFIGURATION = 6,    /* environment or launch information missing/inconsistent */
  ARCOLL_ERROR_INTERNAL = 7          /* a bug in arcoll; please report it */
} arcoll_result_t;

/* ---- Errors and version ------------------------------------------------------------------ */

/* Short constant name of a result code ("success", "timeout", ...); never NULL. */
ARCOLL_C_API const char* arcoll_result_string(arcoll_result_t result);

/* Full message of the most recent failing arcoll_* call on the calling thread, or "" if none
 * has failed on this thread yet. The message is kept until the next failure on the same
 * thread: a successful call does not clear it, so read it right after the failing call (as
 * with errno). The pointer stays valid until the next failing call on this thread. */
ARCOLL_C_API const char* arcoll_last_error(void);

/* Library version, "MAJOR.MINOR.PATCH". */
ARCOLL_C_API const char* arcoll_version(void);

/* Size in bytes of one element of `type`; 0 for a value that is not an arcoll_datatype_t. */
ARCOLL_C_API size_t arcoll_datatype_size(arcoll_datatype_t type);

/* ---- Communicators ----------------------------------------------------------------------- */

/* Joins the job described by the environment, whichever launcher started the process
 * (ARCOLL_RANK/ARCOLL_WORLD_SIZE, mpirun, srun, torchrun; none of them: a world of one).
 * Settings come from ARCOLL_* variables (ARCOLL_TIMEOUT, ARCOLL_TRANSPORT, ...).
 * Blocks until every rank has joined or the timeout expires. On failure *out is set to NULL. */
ARCOLL_C_API arcoll_result_t arcoll_comm_init_from_env(arcoll_comm_t** out);

/* Joins a job described explicitly: this process is `rank` of `world_size`, and rank 0 hosts
 * the rendezvous store on master_addr:master_port. master_addr may be NULL and master_port 0
 * for a world of one. Settings still come from ARCOLL_* variables. Blocks like
 * arcoll_comm_init_from_env; on failure *out is set to NULL. */
ARCOLL_C_API arcoll_result_t arcoll_comm_init(arcoll_comm_t** out, int rank, int world_size,
                                              const char* master_addr, int master_port);

/* Leaves the job and frees the communicator. Every rank should call it. NULL is accepted and
 * does nothing (like free()); a handle destroyed already is ARCOLL_ERROR_INVALID_ARGUMENT, as
 * is any later call with it. */
ARCOLL_C_API arcoll_result_t arcoll_comm_destroy(arcoll_comm_t* comm);

/* The deadline, in seconds, of each call that follows on this rank (ARCOLL_TIMEOUT sets the
 * first): a per-call override. */
ARCOLL_C_API arcoll_result_t arcoll_comm_set_timeout(arcoll_comm_t* comm, double seconds);

/* Gives up on the job: the other ranks' calls fail promptly naming this rank and `reason`
 * (may be NULL) instead of waiting for it, and this communicator's later calls fail. May be
 * called from another thread while a call on this communicator blocks; that call then fails
 * within milliseconds. Destroy the communicator afterwards. */
ARCOLL_C_API arcoll_result_t arcoll_comm_abort(arcoll_comm_t* comm, const char* reason);

/* After a failure (a rank died, was stopped past the deadline, or aborted): a new
 * communicator of the live ranks, renumbered in order, into *out (Communicator::shrink()).
 * Every live rank calls it; `comm` stays broken and should be destroyed. A rank that the
 * others left out (silent past the timeout) gets ARCOLL_ERROR_PEER_FAILURE. On failure *out
 * is set to NULL. */
ARCOLL_C_API arcoll_result_t arcoll_comm_shrink(arcoll_comm_t* comm, arcoll_comm_t** out);

/* Where a process that knows the job's token finds this communicator to join it
 * (arcoll_comm_join): "address:port" of rank 0's store, NUL-terminated into `buffer` of `size`
 * bytes. ARCOLL_ERROR_INVALID_ARGUMENT when it does not fit; ARCOLL_ERROR_CONFIGURATION in a
 * world of one, which has no store. */
ARCOLL_C_API arcoll_result_t arcoll_comm_rendezvous_address(const arcoll_comm_t* comm,
                                                            char* buffer, size_t size);

/* Admits the processes waiting to join (Communicator::grow()): waits up to the timeout until
 * `wait_for` wait, and makes *out a communicator of these ranks followed by every newcomer
 * waiting, in the order they came. Every member calls it; `comm` stays usable. */
ARCOLL_C_API arcoll_result_t arcoll_comm_grow(arcoll_comm_t* comm, int wait_for,
                                              arcoll_comm_t** out);

/* Joins a running group at `address` (a member's arcoll_comm_rendezvous_address) with the job's
 * `token`: returns once the members' arcoll_comm_grow admitted this process, *out its
 * communicator (settings from ARCOLL_* variables); ARCOLL_ERROR_TIMEOUT when none did in time. */
ARCOLL_C_API arcoll_result_t arcoll_comm_join(const char* address, const char* token,
                                              arcoll_comm_t** out);

/* Rank of this process in the communicator, 0 .. size-1. */
ARCOLL_C_API arcoll_result_t arcoll_comm_rank(const arcoll_comm_t* comm, int* rank);
/* Number of ranks. */
ARCOLL_C_API arcoll_result_t arcoll_comm_size(const arcoll_comm_t* comm, int* size);
/* Rank among the ranks running on this host, and how many run on this host. */
ARCOLL_C_API arcoll_result_t arcoll_comm_local_rank(const arcoll_comm_t* comm, int* local_rank);
ARCOLL_C_API arcoll_result_t arcoll_comm_local_size(const arcoll_comm_t* comm, int* local_size);
/* Index of this host in the job (hosts numbered in the order of their lowest rank), and the
 * number of hosts. */
ARCOLL_C_API arcoll_result_t arcoll_comm_node_id(const arcoll_comm_t* comm, int* node_id);
ARCOLL_C_API arcoll_result_t arcoll_comm_node_count(const arcoll_comm_t* comm, int* node_count);

/* ---- Collectives ------------------------------------------------------------------------- *
 * Buffers are host memory; counts are in elements. A count of 0 is valid and moves no data
 * (buffers may then be NULL). A count above 0 with a NULL buffer, an unknown type or operator,
 * or a root outside 0 .. size-1 gives ARCOLL_ERROR_INVALID_ARGUMENT. */

/* recv[i] = op over all ranks of send[i], for i < count. send == recv is the in-place form. */
ARCOLL_C_API arcoll_result_t arcoll_allreduce(arcoll_comm_t* comm, const void* send, void* recv,
                                              size_t count, arcoll_datatype_t type, arcoll_op_t op);

/* send holds size*recv_count elements; rank r receives in recv block r of the reduction.
 * In place when recv == send + rank*recv_count elements. */
ARCOLL_C_API arcoll_result_t arcoll_reduce_scatter(arcoll_comm_t* comm, const void* send,
                                                   void* recv, size_t recv_count,
                                                   arcoll_datatype_t type, arcoll_op_t op);

/* recv holds size*send_count elements: block r is rank r's send buffer.
 * In place when send == recv + rank*send_count elements. */
ARCOLL_C_API arcoll_result_t arcoll_allgather(arcoll_comm_t* comm, const void* send, void* recv,
                                              size_t send_count, arcoll_datatype_t type);

/* Copies root's buffer into every other rank's buffer. */
ARCOLL_C_API arcoll_result_t arcoll_broadcast(arcoll_comm_t* comm, void* buffer, size_t count,
                                              arcoll_datatype_t type, int root);

/* The reduction of every rank's send lands in recv on `root` (recv may be NULL elsewhere).
 * send == recv on the root is the in-place form. */
ARCOLL_C_API arcoll_result_t arcoll_reduce(arcoll_comm_t* comm, const void* send, void* recv,
                                           size_t count, arcoll_datatype_t type, arcoll_op_t op,
                                           int root);

/* On `root`, recv holds size*send_count elements, block r from rank r (recv may be NULL
 * elsewhere). In place when send == recv + root*send_count elements on the root. */
ARCOLL_C_API arcoll_result_t arcoll_gather(arcoll_comm_t* comm, const void* send, void* recv,
                                           size_t send_count, arcoll_datatype_t type, int root);

/* On `root`, send holds size*recv_count elements, block r going to rank r (send may be NULL
 * elsewhere). In place when recv == send + root*recv_count elements on the root. */
ARCOLL_C_API arcoll_result_t arcoll_scatter(arcoll_comm_t* comm, const void* send, void* recv,
                                            size_t recv_count, arcoll_datatype_t type, int root);

/* Block r of send (count elements) goes to rank r; block r of recv comes from rank r. send
 * and recv hold size*count elements each; send == recv is the in-place form. */
ARCOLL_C_API arcoll_result_t arcoll_alltoall(arcoll_comm_t* comm, const void* send, void* recv,
                                             size_t count, arcoll_datatype_t type);

/* Blocks of their own sizes: send_counts[r] elements at send_offsets[r] go to rank r, and
 * recv_counts[r] elements at recv_offsets[r] come from rank r (offsets in elements; each
 * array holds size entries). What rank a sends to b is what b expects from a. */
ARCOLL_C_API arcoll_result_t arcoll_alltoallv(arcoll_comm_t* comm, const void* send,
                                              const size_t* send_counts,
                                              const size_t* send_offsets, void* recv,
                                              const size_t* recv_counts,
                                              const size_t* recv_offsets, arcoll_datatype_t type);

/* Returns once every rank has entered the barrier. */
ARCOLL_C_API arcoll_result_t arcoll_barrier(arcoll_comm_t* comm);

/* ---- Non-blocking collectives ------------------------------------------------------------ *
 * The same calls, checked at once (a bad call fails here and starts nothing), then run on the
 * communicator's progress thread after every call issued before them, while the caller goes
 * on. *work receives a handle to free with arcoll_work_free (NULL on failure). Buffers and
 * count arrays must stay valid until the call has completed. A call that fails fails every
 * later one; destroying the communicator fails the calls that have not completed. */

ARCOLL_C_API arcoll_result_t arcoll_iallreduce(arcoll_comm_t* comm, const void* send, void* recv,
                                               size_t count, arcoll_datatype_t type,
                                               arcoll_op_t op, arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ireduce_scatter(arcoll_comm_t* comm, const void* send,
                                                    void* recv, size_t recv_count,
                                                    arcoll_datatype_t type, arcoll_op_t op,
                                                    arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_iallgather(arcoll_comm_t* comm, const void* send, void* recv,
                                               size_t send_count, arcoll_datatype_t type,
                                               arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ibroadcast(arcoll_comm_t* comm, void* buffer, size_t count,
                                               arcoll_datatype_t type, int root,
                                               arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ireduce(arcoll_comm_t* comm, const void* send, void* recv,
                                            size_t count, arcoll_datatype_t type, arcoll_op_t op,
                                            int root, arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_igather(arcoll_comm_t* comm, const void* send, void* recv,
                                            size_t send_count, arcoll_datatype_t type, int root,
                                            arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_iscatter(arcoll_comm_t* comm, const void* send, void* recv,
                                             size_t recv_count, arcoll_datatype_t type, int root,
                                             arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ialltoall(arcoll_comm_t* comm, const void* send, void* recv,
                                              size_t count, arcoll_datatype_t type,
                                              arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ialltoallv(arcoll_comm_t* comm, const void* send,
                                               const size_t* send_counts,
                                               const size_t* send_offsets, void* recv,
                                               const size_t* recv_counts,
                                               const size_t* recv_offsets, arcoll_datatype_t type,
                                               arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ibarrier(arcoll_comm_t* comm, arcoll_work_t** work);

/* Waits until the call has completed and returns its result (its message in
 * arcoll_last_error() when it failed). May be called again: the same result. */
ARCOLL_C_API arcoll_result_t arcoll_work_wait(arcoll_work_t* work);
/* *done = 1 once the call has completed (arcoll_work_wait then returns at once), else 0. */
ARCOLL_C_API arcoll_result_t arcoll_work_test(arcoll_work_t* work, int* done);
/* Calls callback(user, result) once the call has completed: on the progress thread, or at
 * once on this one when it has completed already. The callback must not call this
 * communicator. */
ARCOLL_C_API arcoll_result_t arcoll_work_on_completion(arcoll_work_t* work,
                                                       void (*callback)(void* user,
                                                                        arcoll_result_t result),
                                                       void* user);
/* Frees the handle; a call not completed yet still runs to its end. NULL is accepted. */
ARCOLL_C_API arcoll_result_t arcoll_work_free(arcoll_work_t* work);

/* ---- Point-to-point ---------------------------------------------------------------------- *
 * Sizes are in bytes; peer is another rank (not this one) and tag is >= 0. Messages between
 * a pair of ranks with the same tag arrive in order. Small messages complete without a
 * matching receive; large ones wait for it. A send and its receive name the same number of
 * bytes. */

ARCOLL_C_API arcoll_result_t arcoll_send(arcoll_comm_t* comm, const void* buffer, size_t bytes,
                                         int peer, int tag);
ARCOLL_C_API arcoll_result_t arcoll_recv(arcoll_comm_t* comm, void* buffer, size_t bytes, int peer,
                                         int tag);

/* out[i] = a[i] op b[i] for i < count, on this rank, with the kernels the collectives use (as
 * MPI_Reduce_local); out may be a or b. ARCOLL_AVG is an invalid argument here: sum, then
 * scale. */
ARCOLL_C_API arcoll_result_t arcoll_reduce_local(const void* a, const void* b, void* out,
                                                 size_t count, arcoll_datatype_t type,
                                                 arcoll_op_t op);

/* dst = src for `bytes` bytes (not overlapping), as memcpy, but destinations larger than the
 * caches are written with streaming stores, as the collectives write large results. */
ARCOLL_C_API arcoll_result_t arcoll_copy_local(void* dst, const void* src, size_t bytes);

/* ---- Shared buffers (arcoll/memory.hpp) -------------------------------------------------- *
 * Memory that the ranks of one host read from each other in place, as MPI_Alloc_mem gives: a
 * message sent from it over shared memory is read (and reduced) by its receiver straight out of
 * the sender's buffer, with no copy through the shared rings. Any call takes such buffers and
 * ordinary ones alike. */

/* *out = `bytes` of zero-filled, page-aligned memory (NULL on failure). */
ARCOLL_C_API arcoll_result_t arcoll_mem_alloc(size_t bytes, void** out);
/* Gives back what arcoll_mem_alloc gave; NULL is ignored, another pointer is an invalid
 * argument. */
ARCOLL_C_API arcoll_result_t arcoll_mem_free(void* pointer);

/* ---- Parameter server (arcoll/parameter_server.hpp) -------------------------------------- *
 * Tensors registered by key, cut into pieces spread over the servers; workers push gradients
 * and pull values. Servers are dedicated ranks (they call arcoll_ps_serve) or, with no server
 * ranks given, every rank serves a share beside its worker. */

typedef struct arcoll_ps arcoll_ps_t;

typedef enum arcoll_consistency {
  ARCOLL_BSP = 0, /* a pull after the t-th push returns the sum of every worker's t-th push */
  ARCOLL_ASP = 1, /* each push applied when it arrives; a pull returns the value as it is */
  ARCOLL_SSP = 2, /* as ASP, no worker more than `staleness` pushes ahead of the slowest */
  ARCOLL_CONSISTENCY_RANGE = -2147483647 - 1 /* not a value: see ARCOLL_DATATYPE_RANGE */
} arcoll_consistency_t;

typedef enum arcoll_server_rule {
  ARCOLL_RULE_SUM = 0, /* servers hold the sum of what was pushed */
  ARCOLL_RULE_SGD = 1, /* servers hold f32 weights stepped by SGD with momentum */
  ARCOLL_RULE_RANGE = -2147483647 - 1
} arcoll_server_rule_t;

typedef struct arcoll_ps_options {
  const int* server_ranks; /* dedicated servers; NULL or none: every rank serves */
  size_t server_count;
  size_t piece_bytes; /* 4 MiB by default */
  arcoll_consistency_t consistency;
  int staleness; /* ARCOLL_SSP's k */
  arcoll_server_rule_t rule;
  double learning_rate; /* ARCOLL_RULE_SGD */
  double momentum;
} arcoll_ps_options_t;

/* The defaults: colocated, 4 MiB pieces, BSP, sum. */
ARCOLL_C_API void arcoll_ps_options_init(arcoll_ps_options_t* options);
/* Collective over comm's ranks; *ps receives the handle (NULL on failure). */
ARCOLL_C_API arcoll_result_t arcoll_ps_create(arcoll_comm_t* comm,
                                              const arcoll_ps_options_t* options,
                                              arcoll_ps_t** ps);
/* A worker that has not finished finishes; a colocated server serves until every worker has. */
ARCOLL_C_API arcoll_result_t arcoll_ps_destroy(arcoll_ps_t* ps);
/* *is_worker = 1 on workers, 0 on dedicated servers. */
ARCOLL_C_API arcoll_result_t arcoll_ps_is_worker(const arcoll_ps_t* ps, int* is_worker);
/* Dedicated servers: serve until every worker has finished. */
ARCOLL_C_API arcoll_result_t arcoll_ps_serve(arcoll_ps_t* ps);
/* Workers, the same keys in the same order; `initial` (worker 0's; NULL: zeros) starts them. */
ARCOLL_C_API arcoll_result_t arcoll_ps_register(arcoll_ps_t* ps, uint64_t key, size_t count,
                                                arcoll_datatype_t type, const void* initial);
ARCOLL_C_API arcoll_result_t arcoll_ps_ipush(arcoll_ps_t* ps, uint64_t key, const void* data,
                                             arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ps_ipull(arcoll_ps_t* ps, uint64_t key, void* data,
                                             arcoll_work_t** work);
ARCOLL_C_API arcoll_result_t arcoll_ps_ipush_pull(arcoll_ps_t* ps, uint64_t key, const void* send,
                                                  void* recv, arcoll_work_t** work);
/* Every worker's earlier pushes are applied everywhere once this returns. */
ARCOLL_C_API arcoll_result_t arcoll_ps_barrier(arcoll_ps_t* ps);
ARCOLL_C_API arcoll_result_t arcoll_ps_finish(arcoll_ps_t* ps);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ARCOLL_ARCOLL_H_ */
