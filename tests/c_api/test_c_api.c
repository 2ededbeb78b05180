/* Tests of the C API (arcoll/arcoll.h), written in C11 as a framework plugin would use it.
 *
 *  1. Calls that need no communicator (version, result strings, NULL arguments, local
 *     reductions and copies, shared buffers' errors), in this process.
 *  2. A world of one: a child with every launcher variable removed, init_from_env and the
 *     explicit init.
 *  3. A world of four: four forked children with ARCOLL_RANK etc. set; rank 0 hosts the
 *     rendezvous store on a socket this process bound before forking (no port race). Every
 *     collective against references computed here in double precision, an all-reduce of
 *     shared buffers (arcoll_mem_alloc), point-to-point, the error paths, a shrink once the
 *     last rank has left, and a newcomer joining the survivors. ARCOLL_ALGO, ARCOLL_TRANSPORT and the other settings in this
 *     process's environment apply, so the test can be repeated per algorithm or transport.
 *
 * Each process counts its checks in shared memory; the parent prints "N passed, M failed" and
 * exits non-zero when anything failed, crashed or hung (alarm).
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arcoll/arcoll.h"

extern char** environ;

enum { kWorld = 4, kSlots = kWorld + 2, kParentSlot = kWorld, kSoloSlot = kWorld + 1 };
enum { kOverallTimeoutSeconds = 60, kChildTimeoutSeconds = 55 };

typedef struct {
  int passed;
  int failed;
  int finished; /* the process reached the end of its checks */
} Counters;

static Counters* counters;      /* shared between all processes, one slot per process */
static Counters* mine;          /* this process's slot */
static char who[32] = "parent"; /* prefix of every line */

static void check(int ok, const char* format, ...) {
  char what[512];
  va_list args;
  va_start(args, format);
  vsnprintf(what, sizeof what, format, args);
  va_end(args);
  if (ok) {
    mine->passed++;
    printf("[%s] ok:   %s\n", who, what);
  } else {
    mine->failed++;
    fprintf(stderr, "[%s] FAIL: %s\n", who, what);
  }
}

/* Checks a call's result; on failure prints the last error too. Returns whether it matched. */
static int check_result(arcoll_result_t got, arcoll_result_t want, const char* what) {
  if (got == want) {
    check(1, "%s -> %s", what, arcoll_result_string(got));
    return 1;
  }
  check(0, "%s -> %s (%d), expected %s; last error: %s", what, arcoll_result_string(got), (int)got,
        arcoll_result_string(want), arcoll_last_error());
  return 0;
}

static double absolute(double x) {
  return x < 0 ? -x : x;
}

static int contains_ignoring_case(const char* text, const char* word) {
  size_t n = strlen(word);
  for (; *text != '\0'; ++text)
    if (strncasecmp(text, word, n) == 0) return 1;
  return 0;
}

/* Removes the variables of every launcher arcoll recognises, so that a child started under
 * mpirun, srun or torchrun does not believe it belongs to that job. With `keep_tuning`, the
 * ARCOLL_* settings that are not about the launch (ARCOLL_ALGO, ARCOLL_TRANSPORT, ...) stay,
 * so that this test can be run once per algorithm or transport. */
static void clear_launcher_environment(int keep_tuning) {
  static const char* const prefixes[] = {"OMPI_", "PMIX_", "PMI_", "SLURM_", "MPI_"};
  static const char* const names[] = {
      "RANK",           "WORLD_SIZE",         "LOCAL_RANK",         "LOCAL_WORLD_SIZE",
      "MASTER_ADDR",    "MASTER_PORT",        "GROUP_RANK",         "ROLE_RANK",
      "ARCOLL_RANK",    "ARCOLL_WORLD_SIZE",  "ARCOLL_LOCAL_RANK",  "ARCOLL_LOCAL_SIZE",
      "ARCOLL_NODE_ID", "ARCOLL_MASTER_ADDR", "ARCOLL_MASTER_PORT", "ARCOLL_STORE_LISTEN_FD"};
  for (;;) {
    char name[256] = "";
    for (char** e = environ; e != NULL && *e != NULL && name[0] == '\0'; ++e) {
      const char* eq = strchr(*e, '=');
      size_t len = eq != NULL ? (size_t)(eq - *e) : strlen(*e);
      if (len == 0 || len >= sizeof name) continue;
      int match = !keep_tuning && strncmp(*e, "ARCOLL_", 7) == 0;
      for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; ++i)
        if (strncmp(*e, prefixes[i], strlen(prefixes[i])) == 0) match = 1;
      for (size_t i = 0; i < sizeof names / sizeof *names; ++i)
        if (strlen(names[i]) == len && strncmp(*e, names[i], len) == 0) match = 1;
      if (match) {
        memcpy(name, *e, len);
        name[len] = '\0';
      }
    }
    if (name[0] == '\0') return;
    unsetenv(name);
  }
}

static void set_env_int(const char* name, int value) {
  char text[32];
  snprintf(text, sizeof text, "%d", value);
  setenv(name, text, 1);
}

/* ---- 1. No communicator ---------------------------------------------------------------- */

static void test_without_communicator(void) {
  const char* version = arcoll_version();
  check(version != NULL && version[0] != '\0' && isdigit((unsigned char)version[0]),
        "arcoll_version() = \"%s\"", version != NULL ? version : "(null)");

  check(strcmp(arcoll_last_error(), "") == 0, "arcoll_last_error() is \"\" before any failure");

  for (int code = ARCOLL_SUCCESS; code <= ARCOLL_ERROR_INTERNAL; ++code) {
    const char* text = arcoll_result_string((arcoll_result_t)code);
    check(text != NULL && text[0] != '\0', "arcoll_result_string(%d) = \"%s\"", code,
          text != NULL ? text : "(null)");
  }
  check(arcoll_result_string((arcoll_result_t)42) != NULL, "arcoll_result_string(42) not NULL");

  static const struct {
    arcoll_datatype_t type;
    size_t size;
  } sizes[] = {{ARCOLL_F32, 4}, {ARCOLL_F64, 8}, {ARCOLL_F16, 2}, {ARCOLL_BF16, 2},
               {ARCOLL_I8, 1},  {ARCOLL_U8, 1},  {ARCOLL_I32, 4}, {ARCOLL_I64, 8}};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; ++i)
    check(arcoll_datatype_size(sizes[i].type) == sizes[i].size, "arcoll_datatype_size(%d) = %zu",
          (int)sizes[i].type, sizes[i].size);
  check(arcoll_datatype_size((arcoll_datatype_t)99) == 0, "arcoll_datatype_size(99) = 0");

  int value = -7;
  check_result(arcoll_comm_rank(NULL, &value), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_rank(NULL, &value)");
  check(value == -7, "a failed getter leaves the output untouched");
  check(strstr(arcoll_last_error(), "NULL") != NULL, "last error names the NULL: \"%s\"",
        arcoll_last_error());
  check_result(arcoll_comm_size(NULL, &value), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_size(NULL, &value)");
  check_result(arcoll_barrier(NULL), ARCOLL_ERROR_INVALID_ARGUMENT, "arcoll_barrier(NULL)");
  float x = 1.0f;
  check_result(arcoll_allreduce(NULL, &x, &x, 1, ARCOLL_F32, ARCOLL_SUM),
               ARCOLL_ERROR_INVALID_ARGUMENT, "arcoll_allreduce(NULL comm)");
  check_result(arcoll_send(NULL, &x, sizeof x, 0, 0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_send(NULL comm)");
  check_result(arcoll_comm_destroy(NULL), ARCOLL_SUCCESS, "arcoll_comm_destroy(NULL)");

  check_result(arcoll_comm_init_from_env(NULL), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_init_from_env(NULL)");
  check_result(arcoll_comm_init(NULL, 0, 1, NULL, 0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_init(NULL, ...)");

  /* Explicit init with arguments that are wrong before any connection is tried. */
  arcoll_comm_t* comm = (arcoll_comm_t*)&value; /* must be reset to NULL */
  check_result(arcoll_comm_init(&comm, 2, 2, "127.0.0.1", 29500), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_init(rank 2 of 2)");
  check(comm == NULL, "failed init sets *out to NULL");
  check_result(arcoll_comm_init(&comm, 0, 0, "127.0.0.1", 29500), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_init(world size 0)");
  check_result(arcoll_comm_init(&comm, -1, 2, "127.0.0.1", 29500), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_init(rank -1)");
  check_result(arcoll_comm_init(&comm, 1, 2, NULL, 29500), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_init(world 2, NULL master address)");
  check_result(arcoll_comm_init(&comm, 1, 2, "127.0.0.1", 70000), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_init(port 70000)");
  check(comm == NULL, "*out still NULL");

  /* A local reduction: every operator that applies, against a double computation. */
  {
    const float a[3] = {1.5f, -2.0f, 4.0f}, b[3] = {0.25f, 3.0f, -8.0f};
    float out[3];
    check_result(arcoll_reduce_local(a, b, out, 3, ARCOLL_F32, ARCOLL_SUM), ARCOLL_SUCCESS,
                 "arcoll_reduce_local f32 sum");
    check(out[0] == 1.75f && out[1] == 1.0f && out[2] == -4.0f, "reduce_local sums");
    check_result(arcoll_reduce_local(a, b, out, 3, ARCOLL_F32, ARCOLL_MAX), ARCOLL_SUCCESS,
                 "arcoll_reduce_local f32 max");
    check(out[0] == 1.5f && out[1] == 3.0f && out[2] == 4.0f, "reduce_local takes the max");
    int32_t ia[2] = {7, -3};
    const int32_t ib[2] = {6, 5};
    check_result(arcoll_reduce_local(ia, ib, ia, 2, ARCOLL_I32, ARCOLL_PROD), ARCOLL_SUCCESS,
                 "arcoll_reduce_local i32 prod, in place");
    check(ia[0] == 42 && ia[1] == -15, "reduce_local multiplies in place");
    check_result(arcoll_reduce_local(a, b, out, 3, ARCOLL_F32, ARCOLL_AVG),
                 ARCOLL_ERROR_INVALID_ARGUMENT, "arcoll_reduce_local avg");
    check_result(arcoll_reduce_local(NULL, b, out, 3, ARCOLL_F32, ARCOLL_SUM),
                 ARCOLL_ERROR_INVALID_ARGUMENT, "arcoll_reduce_local(NULL, ...)");
  }

  /* A local copy, small and larger than the caches (streamed), byte for byte. */
  {
    enum { kLarge = (17 << 20) + 13 };
    unsigned char* src = malloc(kLarge);
    unsigned char* dst = malloc(kLarge + 1);
    if (src == NULL || dst == NULL) {
      check(0, "out of memory");
    } else {
      for (size_t i = 0; i < kLarge; ++i) src[i] = (unsigned char)(i * 7 + 3);
      const size_t sizes[] = {0, 1, 100, kLarge};
      for (size_t s = 0; s < sizeof sizes / sizeof *sizes; ++s) {
        memset(dst, 0, kLarge + 1);
        char what[64];
        snprintf(what, sizeof what, "arcoll_copy_local of %zu bytes", sizes[s]);
        check_result(arcoll_copy_local(dst, src, sizes[s]), ARCOLL_SUCCESS, what);
        check(memcmp(dst, src, sizes[s]) == 0 && dst[sizes[s]] == 0,
              "copy_local of %zu bytes copies every byte and none beyond", sizes[s]);
      }
    }
    free(src);
    free(dst);
    const int word = 1;
    check_result(arcoll_copy_local(NULL, &word, sizeof word), ARCOLL_ERROR_INVALID_ARGUMENT,
                 "arcoll_copy_local(NULL, ...)");
  }

  /* Shared buffers: NULL output, a pointer that is not one, NULL. */
  check_result(arcoll_mem_alloc(64, NULL), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_mem_alloc(64, NULL)");
  int on_stack = 0;
  check_result(arcoll_mem_free(&on_stack), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_mem_free(a stack address)");
  check_result(arcoll_mem_free(NULL), ARCOLL_SUCCESS, "arcoll_mem_free(NULL)");
}

/* ---- 2. A world of one ----------------------------------------------------------------- */

static void check_world_of_one(arcoll_comm_t* comm, const char* how) {
  int rank = -1, size = -1, local_rank = -1, local_size = -1, node = -1;
  check_result(arcoll_comm_rank(comm, &rank), ARCOLL_SUCCESS, "arcoll_comm_rank");
  check_result(arcoll_comm_size(comm, &size), ARCOLL_SUCCESS, "arcoll_comm_size");
  check_result(arcoll_comm_local_rank(comm, &local_rank), ARCOLL_SUCCESS, "arcoll_comm_local_rank");
  check_result(arcoll_comm_local_size(comm, &local_size), ARCOLL_SUCCESS, "arcoll_comm_local_size");
  check_result(arcoll_comm_node_id(comm, &node), ARCOLL_SUCCESS, "arcoll_comm_node_id");
  check(rank == 0 && size == 1 && local_rank == 0 && local_size == 1 && node == 0,
        "%s: rank %d size %d local %d/%d node %d (want 0 1 0/1 0)", how, rank, size, local_rank,
        local_size, node);

  double send[5] = {1.5, -2.0, 3.25, 0.0, 1e300};
  double recv[5] = {0};
  check_result(arcoll_allreduce(comm, send, recv, 5, ARCOLL_F64, ARCOLL_SUM), ARCOLL_SUCCESS,
               "allreduce f64 sum, world of one");
  check(memcmp(send, recv, sizeof send) == 0, "%s: allreduce of one rank copies send to recv", how);
  float avg[3] = {1.0f, 2.0f, 3.0f};
  check_result(arcoll_allreduce(comm, avg, avg, 3, ARCOLL_F32, ARCOLL_AVG), ARCOLL_SUCCESS,
               "allreduce f32 avg in place, world of one");
  check(avg[0] == 1.0f && avg[1] == 2.0f && avg[2] == 3.0f, "%s: avg over one rank is identity",
        how);
  int gathered[2] = {0, 0};
  int mine_values[2] = {11, 12};
  check_result(arcoll_allgather(comm, mine_values, gathered, 2, ARCOLL_I32), ARCOLL_SUCCESS,
               "allgather, world of one");
  check(gathered[0] == 11 && gathered[1] == 12, "%s: allgather of one rank", how);
  check_result(arcoll_broadcast(comm, send, 5, ARCOLL_F64, 0), ARCOLL_SUCCESS,
               "broadcast root 0, world of one");
  check_result(arcoll_broadcast(comm, send, 5, ARCOLL_F64, 1), ARCOLL_ERROR_INVALID_ARGUMENT,
               "broadcast root 1, world of one");
  check_result(arcoll_barrier(comm), ARCOLL_SUCCESS, "barrier, world of one");

  /* Misuse: partly overlapping buffers, a timeout that is not positive. */
  check_result(arcoll_allreduce(comm, send, send + 1, 4, ARCOLL_F64, ARCOLL_SUM),
               ARCOLL_ERROR_INVALID_ARGUMENT, "allreduce with overlapping buffers");
  check(strstr(arcoll_last_error(), "overlap") != NULL, "last error names the overlap: \"%s\"",
        arcoll_last_error());
  check_result(arcoll_comm_set_timeout(comm, 0.0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_set_timeout(0)");
  check_result(arcoll_comm_set_timeout(comm, 2.5), ARCOLL_SUCCESS, "arcoll_comm_set_timeout(2.5)");
  check_result(arcoll_barrier(comm), ARCOLL_SUCCESS, "barrier after set_timeout");
}

/* After destroy the handle is dead: calls with it fail instead of touching freed memory. */
static void check_destroyed(arcoll_comm_t* comm) {
  int value = 0;
  check_result(arcoll_comm_rank(comm, &value), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_rank on a destroyed communicator");
  check(strstr(arcoll_last_error(), "destroyed") != NULL,
        "last error says destroyed: \"%s\"", arcoll_last_error());
  check_result(arcoll_barrier(comm), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_barrier on a destroyed communicator");
  check_result(arcoll_comm_destroy(comm), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_destroy twice");
}

static void run_world_of_one(void) {
  clear_launcher_environment(0);
  arcoll_comm_t* comm = NULL;
  if (check_result(arcoll_comm_init_from_env(&comm), ARCOLL_SUCCESS,
                   "arcoll_comm_init_from_env with no launcher variables")) {
    check(comm != NULL, "init_from_env gave a communicator");
    check_world_of_one(comm, "init_from_env");
    check_result(arcoll_comm_destroy(comm), ARCOLL_SUCCESS, "arcoll_comm_destroy");
    check_destroyed(comm);
  }
  comm = NULL;
  if (check_result(arcoll_comm_init(&comm, 0, 1, NULL, 0), ARCOLL_SUCCESS,
                   "arcoll_comm_init(rank 0 of 1, no master address)")) {
    check_world_of_one(comm, "explicit init");
    check_result(arcoll_comm_abort(comm, "test"), ARCOLL_SUCCESS, "arcoll_comm_abort");
    check_result(arcoll_barrier(comm), ARCOLL_ERROR_PEER_FAILURE, "barrier after abort");
    check(strstr(arcoll_last_error(), "abort") != NULL, "last error names the abort: \"%s\"",
          arcoll_last_error());
    check_result(arcoll_comm_destroy(comm), ARCOLL_SUCCESS, "arcoll_comm_destroy after abort");
  }
}

/* ---- 3. A world of four ---------------------------------------------------------------- */

/* Inputs: exactly representable in float, varied in sign and magnitude. */
static float f32_input(int rank, size_t i) {
  return (float)((double)(int)((i * 37 + (size_t)rank * 101) % 199) - 99.0) * 0.125f +
         (float)rank * 0.0625f;
}

static int32_t i32_input(int rank, size_t i) {
  return (int32_t)((i * 7919 + (size_t)rank * 104729) % 200003) - 100001;
}

/* A collective call that fails leaves the ranks out of step: stop this rank. */
#define REQUIRE_SUCCESS(call, ...)                            \
  do {                                                        \
    char what_[256];                                          \
    snprintf(what_, sizeof what_, __VA_ARGS__);               \
    if (!check_result((call), ARCOLL_SUCCESS, what_)) return; \
  } while (0)

static int test_allreduce(arcoll_comm_t* comm, int rank, int size) {
  int in_step = 0;
  static const size_t counts[] = {0, 1, 7, 1000};
  enum { kMax = 1000, kGuard = 4 };
  float* fsend = malloc((kMax + kGuard) * sizeof(float));
  float* frecv = malloc((kMax + kGuard) * sizeof(float));
  int32_t* isend = malloc((kMax + kGuard) * sizeof(int32_t));
  int32_t* irecv = malloc((kMax + kGuard) * sizeof(int32_t));
  if (fsend == NULL || frecv == NULL || isend == NULL || irecv == NULL) {
    check(0, "out of memory");
    goto done;
  }
  for (size_t c = 0; c < sizeof counts / sizeof *counts; ++c) {
    const size_t count = counts[c];
    for (int in_place = 0; in_place <= 1; ++in_place) {
      const char* form = in_place ? "in place" : "out of place";

      /* f32 sum */
      for (size_t i = 0; i < kMax + kGuard; ++i) {
        fsend[i] = f32_input(rank, i);
        frecv[i] = -12345.0f;
      }
      float* fout = in_place ? fsend : frecv;
      if (in_place)
        for (size_t i = count; i < kMax + kGuard; ++i) fsend[i] = -12345.0f;
      {
        char what[128];
        snprintf(what, sizeof what, "allreduce f32 sum count %zu %s", count, form);
        if (!check_result(arcoll_allreduce(comm, fsend, fout, count, ARCOLL_F32, ARCOLL_SUM),
                          ARCOLL_SUCCESS, what))
          goto done;
      }
      size_t bad = 0, first_bad = 0;
      double worst = 0;
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int q = 0; q < size; ++q) want += (double)f32_input(q, i);
        double err = absolute((double)fout[i] - want);
        if (err > 1e-5 * (absolute(want) + 1.0)) {
          if (bad++ == 0) first_bad = i;
        }
        if (err > worst) worst = err;
      }
      int guard_ok = 1;
      for (size_t i = count; i < kMax + kGuard; ++i)
        if (fout[i] != -12345.0f) guard_ok = 0;
      int send_ok = 1;
      if (!in_place)
        for (size_t i = 0; i < kMax + kGuard; ++i)
          if (fsend[i] != f32_input(rank, i)) send_ok = 0;
      check(bad == 0, "allreduce f32 sum count %zu %s: values (max error %g%s)", count, form, worst,
            bad ? ", first wrong element below" : "");
      if (bad)
        fprintf(stderr, "[%s]   element %zu = %g\n", who, first_bad, (double)fout[first_bad]);
      check(guard_ok, "allreduce f32 sum count %zu %s: nothing written past count", count, form);
      if (!in_place) check(send_ok, "allreduce f32 sum count %zu: send buffer unchanged", count);

      /* i32 max */
      for (size_t i = 0; i < kMax + kGuard; ++i) {
        isend[i] = i32_input(rank, i);
        irecv[i] = 77;
      }
      int32_t* iout = in_place ? isend : irecv;
      if (in_place)
        for (size_t i = count; i < kMax + kGuard; ++i) isend[i] = 77;
      {
        char what[128];
        snprintf(what, sizeof what, "allreduce i32 max count %zu %s", count, form);
        if (!check_result(arcoll_allreduce(comm, isend, iout, count, ARCOLL_I32, ARCOLL_MAX),
                          ARCOLL_SUCCESS, what))
          goto done;
      }
      bad = 0;
      for (size_t i = 0; i < count; ++i) {
        int32_t want = i32_input(0, i);
        for (int q = 1; q < size; ++q)
          if (i32_input(q, i) > want) want = i32_input(q, i);
        if (iout[i] != want && bad++ == 0)
          fprintf(stderr, "[%s]   i32 max element %zu = %d, want %d\n", who, i, (int)iout[i],
                  (int)want);
      }
      guard_ok = 1;
      for (size_t i = count; i < kMax + kGuard; ++i)
        if (iout[i] != 77) guard_ok = 0;
      check(bad == 0, "allreduce i32 max count %zu %s: values exact", count, form);
      check(guard_ok, "allreduce i32 max count %zu %s: nothing written past count", count, form);
    }
  }
  /* A floating average, against the double reference. */
  {
    double dsend[9], want[9];
    for (int i = 0; i < 9; ++i) {
      dsend[i] = (rank + 1) * 1.5 - i;
      want[i] = 0;
      for (int q = 0; q < size; ++q) want[i] += (q + 1) * 1.5 - i;
      want[i] /= size;
    }
    if (!check_result(arcoll_allreduce(comm, dsend, dsend, 9, ARCOLL_F64, ARCOLL_AVG),
                      ARCOLL_SUCCESS, "allreduce f64 avg count 9 in place"))
      goto done;
    int ok = 1;
    for (int i = 0; i < 9; ++i)
      if (absolute(dsend[i] - want[i]) > 1e-12) ok = 0;
    check(ok, "allreduce f64 avg values");
  }
  in_step = 1;
done:
  free(fsend);
  free(frecv);
  free(isend);
  free(irecv);
  return in_step;
}

/* The collective tests below run each call in its blocking form, then (nonblocking) in its
 * non-blocking twin, posted and waited for at once: the same arguments, the same results. */
static arcoll_work_t* posted = NULL;
static arcoll_result_t waited(arcoll_result_t result) {
  if (result != ARCOLL_SUCCESS) return result;
  result = arcoll_work_wait(posted);
  arcoll_work_free(posted);
  posted = NULL;
  return result;
}
#define COLLECTIVE(nonblocking, name, ...) \
  ((nonblocking) ? waited(arcoll_i##name(__VA_ARGS__, &posted)) : arcoll_##name(__VA_ARGS__))

static int test_reduce_scatter(arcoll_comm_t* comm, int rank, int size, int nonblocking) {
  enum { kBlock = 3 };
  float send[kWorld * kBlock], recv[kBlock];
  for (int i = 0; i < size * kBlock; ++i) send[i] = (float)(rank * 1000 + i);
  for (int i = 0; i < kBlock; ++i) recv[i] = -1.0f;
  if (!check_result(
          COLLECTIVE(nonblocking, reduce_scatter, comm, send, recv, kBlock, ARCOLL_F32, ARCOLL_SUM),
          ARCOLL_SUCCESS, "reduce_scatter f32 sum block 3"))
    return 0;
  int ok = 1;
  for (int i = 0; i < kBlock; ++i) {
    double want = 0;
    for (int q = 0; q < size; ++q) want += q * 1000 + rank * kBlock + i;
    if ((double)recv[i] != want) ok = 0;
  }
  check(ok, "reduce_scatter: rank %d got block %d of the sum", rank, rank);
  return 1;
}

static int test_allgather(arcoll_comm_t* comm, int rank, int size, int nonblocking) {
  enum { kBlock = 5 };
  int32_t send[kBlock], recv[kWorld * kBlock];
  for (int i = 0; i < kBlock; ++i) send[i] = rank * 100 + i;
  for (int i = 0; i < size * kBlock; ++i) recv[i] = -1;
  if (!check_result(COLLECTIVE(nonblocking, allgather, comm, send, recv, kBlock, ARCOLL_I32),
                    ARCOLL_SUCCESS, "allgather i32 block 5 out of place"))
    return 0;
  int ok = 1;
  for (int q = 0; q < size; ++q)
    for (int i = 0; i < kBlock; ++i)
      if (recv[q * kBlock + i] != q * 100 + i) ok = 0;
  check(ok, "allgather out of place: block r comes from rank r");

  /* In place: this rank's block already sits in recv. */
  for (int i = 0; i < size * kBlock; ++i) recv[i] = -1;
  for (int i = 0; i < kBlock; ++i) recv[rank * kBlock + i] = rank * 100 + 50 + i;
  if (!check_result(
          COLLECTIVE(nonblocking, allgather, comm, recv + rank * kBlock, recv, kBlock, ARCOLL_I32),
          ARCOLL_SUCCESS, "allgather i32 block 5 in place"))
    return 0;
  ok = 1;
  for (int q = 0; q < size; ++q)
    for (int i = 0; i < kBlock; ++i)
      if (recv[q * kBlock + i] != q * 100 + 50 + i) ok = 0;
  check(ok, "allgather in place: block r comes from rank r");
  return 1;
}

static int test_broadcast(arcoll_comm_t* comm, int rank, int nonblocking) {
  enum { kCount = 33, kRoot = 2 };
  double buffer[kCount];
  for (int i = 0; i < kCount; ++i) buffer[i] = rank == kRoot ? 0.5 * i - 3.0 : -999.0 - rank;
  if (!check_result(COLLECTIVE(nonblocking, broadcast, comm, buffer, kCount, ARCOLL_F64, kRoot),
                    ARCOLL_SUCCESS, "broadcast f64 count 33 from root 2"))
    return 0;
  int ok = 1;
  for (int i = 0; i < kCount; ++i)
    if (buffer[i] != 0.5 * i - 3.0) ok = 0;
  check(ok, "broadcast: every rank holds root 2's values");
  return 1;
}

/* Fills a receive buffer with a value no call here writes, so a call that writes nothing fails. */
static void clear_i32(int32_t* buffer, int count) {
  for (int i = 0; i < count; ++i) buffer[i] = -1;
}

/* Reduce, gather and scatter to and from root 1, all-to-all with equal and unequal blocks. */
static int test_rooted_and_alltoall(arcoll_comm_t* comm, int rank, int size, int nonblocking) {
  enum { kRoot = 1, kCount = 6 };
  int32_t send[kWorld * kCount], recv[kWorld * kCount];
  for (int i = 0; i < kCount; ++i) send[i] = rank * 10 + i;
  clear_i32(recv, kWorld * kCount);
  if (!check_result(COLLECTIVE(nonblocking, reduce, comm, send, rank == kRoot ? recv : NULL, kCount,
                               ARCOLL_I32, ARCOLL_MAX, kRoot),
                    ARCOLL_SUCCESS, "reduce i32 max to root 1"))
    return 0;
  if (rank == kRoot) {
    int ok = 1;
    for (int i = 0; i < kCount; ++i)
      if (recv[i] != (size - 1) * 10 + i) ok = 0;
    check(ok, "reduce: the root holds the maximum");
  }
  clear_i32(recv, kWorld * kCount);
  if (!check_result(COLLECTIVE(nonblocking, gather, comm, send, rank == kRoot ? recv : NULL, kCount,
                               ARCOLL_I32, kRoot),
                    ARCOLL_SUCCESS, "gather i32 to root 1"))
    return 0;
  if (rank == kRoot) {
    int ok = 1;
    for (int q = 0; q < size; ++q)
      for (int i = 0; i < kCount; ++i)
        if (recv[q * kCount + i] != q * 10 + i) ok = 0;
    check(ok, "gather: block r from rank r");
  }
  for (int i = 0; i < size * kCount; ++i) send[i] = 1000 + i;
  clear_i32(recv, kWorld * kCount);
  if (!check_result(COLLECTIVE(nonblocking, scatter, comm, rank == kRoot ? send : NULL, recv,
                               kCount, ARCOLL_I32, kRoot),
                    ARCOLL_SUCCESS, "scatter i32 from root 1"))
    return 0;
  int ok = 1;
  for (int i = 0; i < kCount; ++i)
    if (recv[i] != 1000 + rank * kCount + i) ok = 0;
  check(ok, "scatter: rank r gets block r");

  for (int q = 0; q < size; ++q)
    for (int i = 0; i < kCount; ++i) send[q * kCount + i] = rank * 100 + q * 10 + i;
  clear_i32(recv, kWorld * kCount);
  if (!check_result(COLLECTIVE(nonblocking, alltoall, comm, send, recv, kCount, ARCOLL_I32),
                    ARCOLL_SUCCESS, "alltoall i32 block 6"))
    return 0;
  ok = 1;
  for (int q = 0; q < size; ++q)
    for (int i = 0; i < kCount; ++i)
      if (recv[q * kCount + i] != q * 100 + rank * 10 + i) ok = 0;
  check(ok, "alltoall: block q of rank q's send comes to block q");

  /* Rank a sends (a + b) % 3 elements to rank b, packed. */
  size_t send_counts[kWorld], send_offsets[kWorld], recv_counts[kWorld], recv_offsets[kWorld];
  size_t at_send = 0, at_recv = 0;
  for (int q = 0; q < size; ++q) {
    send_counts[q] = (size_t)((rank + q) % 3);
    send_offsets[q] = at_send;
    at_send += send_counts[q];
    recv_counts[q] = (size_t)((q + rank) % 3);
    recv_offsets[q] = at_recv;
    at_recv += recv_counts[q];
  }
  for (size_t i = 0; i < at_send; ++i) send[i] = rank * 100 + (int)i;
  clear_i32(recv, kWorld * kCount);
  if (!check_result(COLLECTIVE(nonblocking, alltoallv, comm, send, send_counts, send_offsets, recv,
                               recv_counts, recv_offsets, ARCOLL_I32),
                    ARCOLL_SUCCESS, "alltoallv i32 unequal blocks"))
    return 0;
  ok = 1;
  for (int q = 0; q < size; ++q) {
    /* Rank q's block for this rank starts after its blocks for ranks 0 .. rank-1. */
    size_t start = 0;
    for (int b = 0; b < rank; ++b) start += (size_t)((q + b) % 3);
    for (size_t i = 0; i < recv_counts[q]; ++i)
      if (recv[recv_offsets[q] + i] != q * 100 + (int)(start + i)) ok = 0;
  }
  check(ok, "alltoallv: each block from its rank, at its offset");
  return 1;
}

static int completions = 0;
static void count_completion(void* user, arcoll_result_t result) {
  if (result == ARCOLL_SUCCESS) ++*(int*)user;
}

/* Many non-blocking all-reduces and others outstanding at once, a callback each, then waited
 * for; a bad call fails at once with no handle; the handles are freed, a freed one refused. */
static int test_nonblocking(arcoll_comm_t* comm, int rank, int size) {
  enum { kCalls = 12, kCount = 1001 };
  static float buffers[kCalls][kCount];
  arcoll_work_t* works[kCalls + 2] = {NULL};
  for (int c = 0; c < kCalls; ++c) {
    for (int i = 0; i < kCount; ++i) buffers[c][i] = (float)(rank + c + i % 7);
    char what[64];
    snprintf(what, sizeof what, "iallreduce %d", c);
    if (!check_result(arcoll_iallreduce(comm, buffers[c], buffers[c], kCount, ARCOLL_F32,
                                        ARCOLL_SUM, &works[c]),
                      ARCOLL_SUCCESS, what))
      return 0;
    check_result(arcoll_work_on_completion(works[c], count_completion, &completions),
                 ARCOLL_SUCCESS, "arcoll_work_on_completion");
  }
  int32_t value = rank, gathered[kWorld];
  if (!check_result(arcoll_iallgather(comm, &value, gathered, 1, ARCOLL_I32, &works[kCalls]),
                    ARCOLL_SUCCESS, "iallgather") ||
      !check_result(arcoll_ibarrier(comm, &works[kCalls + 1]), ARCOLL_SUCCESS, "ibarrier"))
    return 0;
  arcoll_work_t* rejected = (arcoll_work_t*)1;
  check_result(arcoll_iallreduce(comm, NULL, buffers[0], 8, ARCOLL_F32, ARCOLL_SUM, &rejected),
               ARCOLL_ERROR_INVALID_ARGUMENT, "iallreduce from a NULL buffer");
  check(rejected == NULL, "a rejected call gives no work handle");
  int ok = 1;
  for (int c = 0; c < kCalls + 2; ++c)
    if (arcoll_work_wait(works[c]) != ARCOLL_SUCCESS) ok = 0;
  check(ok, "every non-blocking call succeeded: %s", ok ? "" : arcoll_last_error());
  int done = 0;
  check_result(arcoll_work_test(works[0], &done), ARCOLL_SUCCESS, "arcoll_work_test");
  check(done == 1, "a waited call tests complete");
  check(completions == kCalls, "%d of %d completion callbacks ran", completions, kCalls);
  for (int c = 0; c < kCalls; ++c)
    for (int i = 0; i < kCount; ++i) {
      double want = 0;
      for (int q = 0; q < size; ++q) want += q + c + i % 7;
      if ((double)buffers[c][i] != want) ok = 0;
    }
  check(ok, "non-blocking all-reduces: right sums");
  for (int q = 0; q < size; ++q) ok = ok && gathered[q] == q;
  check(ok, "non-blocking all-gather: right blocks");
  for (int c = 0; c < kCalls + 2; ++c) arcoll_work_free(works[c]);
  check_result(arcoll_work_wait(works[0]), ARCOLL_ERROR_INVALID_ARGUMENT, "wait on a freed handle");
  check_result(arcoll_work_free(NULL), ARCOLL_SUCCESS, "arcoll_work_free(NULL)");
  return ok;
}

/* The parameter server: the last rank serves, the others push and pull the sum of every
 * worker's push: under BSP in one push_pull, under ASP pushed, met at a barrier, then pulled;
 * bad calls are refused. */
static int test_parameter_server(arcoll_comm_t* comm, int rank, int size,
                                 arcoll_consistency_t consistency) {
  enum { kCount = 3001 };
  arcoll_ps_options_t options;
  arcoll_ps_options_init(&options);
  const int server = size - 1;
  options.server_ranks = &server;
  options.server_count = 1;
  options.piece_bytes = 1024;
  options.consistency = consistency;
  arcoll_ps_t* ps = NULL;
  if (!check_result(arcoll_ps_create(comm, &options, &ps), ARCOLL_SUCCESS, "arcoll_ps_create"))
    return 0;
  int is_worker = -1, ok = 1;
  check_result(arcoll_ps_is_worker(ps, &is_worker), ARCOLL_SUCCESS, "arcoll_ps_is_worker");
  check(is_worker == (rank != server), "rank %d is %s", rank, is_worker ? "a worker" : "a server");
  if (!is_worker) {
    ok = check_result(arcoll_ps_serve(ps), ARCOLL_SUCCESS, "arcoll_ps_serve");
  } else {
    static float send[kCount], recv[kCount];
    for (int i = 0; i < kCount; ++i) send[i] = (float)(rank + i % 5);
    ok = check_result(arcoll_ps_register(ps, 11, kCount, ARCOLL_F32, NULL), ARCOLL_SUCCESS,
                      "arcoll_ps_register");
    for (int i = 0; i < kCount; ++i) recv[i] = -1.0f; /* left by the previous run */
    arcoll_work_t* work = NULL;
    if (consistency == ARCOLL_BSP) {
      ok = ok && check_result(arcoll_ps_ipush_pull(ps, 11, send, recv, &work), ARCOLL_SUCCESS,
                              "arcoll_ps_ipush_pull");
      ok = ok && check_result(arcoll_work_wait(work), ARCOLL_SUCCESS, "wait for ipush_pull");
    } else {
      ok = ok &&
           check_result(arcoll_ps_ipush(ps, 11, send, &work), ARCOLL_SUCCESS, "arcoll_ps_ipush");
      ok = ok && check_result(arcoll_work_wait(work), ARCOLL_SUCCESS, "wait for ipush");
      arcoll_work_free(work);
      work = NULL;
      ok = ok && check_result(arcoll_ps_barrier(ps), ARCOLL_SUCCESS, "arcoll_ps_barrier");
      ok = ok &&
           check_result(arcoll_ps_ipull(ps, 11, recv, &work), ARCOLL_SUCCESS, "arcoll_ps_ipull");
      ok = ok && check_result(arcoll_work_wait(work), ARCOLL_SUCCESS, "wait for ipull");
    }
    arcoll_work_free(work);
    for (int i = 0; ok && i < kCount; ++i) {
      double want = 0;
      for (int q = 0; q < server; ++q) want += q + i % 5;
      if ((double)recv[i] != want) ok = 0;
    }
    check(ok, "parameter server (%s): the sum of every worker's push",
          consistency == ARCOLL_BSP ? "BSP" : "ASP");
    arcoll_work_t* bad = (arcoll_work_t*)1;
    check_result(arcoll_ps_ipush(ps, 99, send, &bad), ARCOLL_ERROR_INVALID_ARGUMENT,
                 "push of an unregistered key");
    check(bad == NULL, "a refused push gives no work handle");
    ok = ok && check_result(arcoll_ps_finish(ps), ARCOLL_SUCCESS, "arcoll_ps_finish");
  }
  check_result(arcoll_ps_destroy(ps), ARCOLL_SUCCESS, "arcoll_ps_destroy");
  check_result(arcoll_ps_serve(ps), ARCOLL_ERROR_INVALID_ARGUMENT, "serve on a destroyed handle");
  return ok;
}

/* An all-reduce on buffers from arcoll_mem_alloc, large enough that the ranks read each
 * other's in place, against the double-precision reference. */
static int test_shared_buffers(arcoll_comm_t* comm, int rank, int size) {
  enum { kCount = 100003 };
  float* send = NULL;
  float* recv = NULL;
  if (!check_result(arcoll_mem_alloc(kCount * sizeof(float), (void**)&send), ARCOLL_SUCCESS,
                    "arcoll_mem_alloc(send)") ||
      !check_result(arcoll_mem_alloc(kCount * sizeof(float), (void**)&recv), ARCOLL_SUCCESS,
                    "arcoll_mem_alloc(recv)")) {
    arcoll_mem_free(send);
    return 0;
  }
  check(recv[kCount - 1] == 0.0f && ((uintptr_t)recv % 4096) == 0,
        "arcoll_mem_alloc gives zero-filled, page-aligned memory");
  for (size_t i = 0; i < kCount; ++i) send[i] = f32_input(rank, i);
  const int ok = check_result(arcoll_allreduce(comm, send, recv, kCount, ARCOLL_F32, ARCOLL_SUM),
                              ARCOLL_SUCCESS, "allreduce f32 sum of shared buffers");
  if (ok) {
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) {
      double want = 0;
      for (int q = 0; q < size; ++q) want += (double)f32_input(q, i);
      if (absolute((double)recv[i] - want) > 1e-5 * (absolute(want) + 1.0)) ++bad;
    }
    check(bad == 0, "allreduce of shared buffers: %zu of %d elements wrong", bad, kCount);
  }
  check_result(arcoll_mem_free(send), ARCOLL_SUCCESS, "arcoll_mem_free(send)");
  check_result(arcoll_mem_free(recv), ARCOLL_SUCCESS, "arcoll_mem_free(recv)");
  return ok;
}

static int test_point_to_point(arcoll_comm_t* comm, int rank) {
  enum { kSmall = 1000, kLarge = 4 << 20 };
  if (rank > 1) return 1;
  const int peer = 1 - rank;
  unsigned char* small = malloc(kSmall);
  unsigned char* large = malloc(kLarge);
  int result = 0;
  if (small == NULL || large == NULL) {
    check(0, "out of memory");
    goto done;
  }
  /* Rank 0 sends first, rank 1 receives first: a small message then a large one each way. */
  for (int round = 0; round < 2; ++round) {
    const int sending = (round == 0) == (rank == 0);
    const int tag = 7 + round;
    if (sending) {
      for (int i = 0; i < kSmall; ++i) small[i] = (unsigned char)(i * 3 + rank);
      for (int i = 0; i < kLarge; ++i) large[i] = (unsigned char)(i * 7 + rank + (i >> 12));
      char what[96];
      snprintf(what, sizeof what, "send 1000 B to rank %d tag %d", peer, tag);
      if (!check_result(arcoll_send(comm, small, kSmall, peer, tag), ARCOLL_SUCCESS, what))
        goto done;
      snprintf(what, sizeof what, "send 4 MiB to rank %d tag %d", peer, tag);
      if (!check_result(arcoll_send(comm, large, kLarge, peer, tag), ARCOLL_SUCCESS, what))
        goto done;
    } else {
      memset(small, 0, kSmall);
      memset(large, 0, kLarge);
      char what[96];
      snprintf(what, sizeof what, "recv 1000 B from rank %d tag %d", peer, tag);
      if (!check_result(arcoll_recv(comm, small, kSmall, peer, tag), ARCOLL_SUCCESS, what))
        goto done;
      snprintf(what, sizeof what, "recv 4 MiB from rank %d tag %d", peer, tag);
      if (!check_result(arcoll_recv(comm, large, kLarge, peer, tag), ARCOLL_SUCCESS, what))
        goto done;
      int ok = 1;
      for (int i = 0; i < kSmall; ++i)
        if (small[i] != (unsigned char)(i * 3 + peer)) ok = 0;
      check(ok, "small message from rank %d intact", peer);
      ok = 1;
      for (int i = 0; i < kLarge; ++i)
        if (large[i] != (unsigned char)(i * 7 + peer + (i >> 12))) ok = 0;
      check(ok, "large message from rank %d intact", peer);
    }
  }
  result = 1;
done:
  free(small);
  free(large);
  return result;
}

/* Every rank makes the same bad calls: each must fail locally, before any communication. */
static void test_error_paths(arcoll_comm_t* comm, int rank, int size) {
  float f[8] = {0};
  int32_t i32[8] = {0};
  int value = 0;

  check_result(arcoll_allreduce(NULL, f, f, 8, ARCOLL_F32, ARCOLL_SUM),
               ARCOLL_ERROR_INVALID_ARGUMENT, "allreduce with a NULL communicator");
  check_result(arcoll_comm_rank(comm, NULL), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_rank(comm, NULL)");

  check_result(arcoll_allreduce(comm, i32, i32, 8, ARCOLL_I32, ARCOLL_AVG),
               ARCOLL_ERROR_INVALID_ARGUMENT, "allreduce avg on i32");
  const char* message = arcoll_last_error();
  check(contains_ignoring_case(message, "avg"), "its last error mentions avg: \"%s\"", message);

  /* The message stays until the next failure, successful calls do not clear it. */
  check_result(arcoll_comm_size(comm, &value), ARCOLL_SUCCESS, "a successful call");
  check(contains_ignoring_case(arcoll_last_error(), "avg"),
        "last error survives a successful call: \"%s\"", arcoll_last_error());

  check_result(arcoll_broadcast(comm, f, 8, ARCOLL_F32, size), ARCOLL_ERROR_INVALID_ARGUMENT,
               "broadcast with root == size");
  check_result(arcoll_broadcast(comm, f, 8, ARCOLL_F32, -1), ARCOLL_ERROR_INVALID_ARGUMENT,
               "broadcast with root -1");
  check_result(arcoll_allreduce(comm, NULL, f, 8, ARCOLL_F32, ARCOLL_SUM),
               ARCOLL_ERROR_INVALID_ARGUMENT, "allreduce count 8 with a NULL send buffer");
  check_result(arcoll_allreduce(comm, f, NULL, 8, ARCOLL_F32, ARCOLL_SUM),
               ARCOLL_ERROR_INVALID_ARGUMENT, "allreduce count 8 with a NULL recv buffer");
  check_result(arcoll_broadcast(comm, NULL, 8, ARCOLL_F32, 0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "broadcast count 8 with a NULL buffer");
  check_result(arcoll_allgather(comm, f, NULL, 2, ARCOLL_F32), ARCOLL_ERROR_INVALID_ARGUMENT,
               "allgather count 2 with a NULL recv buffer");
  check_result(arcoll_allreduce(comm, f, f, 8, (arcoll_datatype_t)99, ARCOLL_SUM),
               ARCOLL_ERROR_INVALID_ARGUMENT, "allreduce with type 99");
  check_result(arcoll_allreduce(comm, f, f, 8, ARCOLL_F32, (arcoll_op_t)-1),
               ARCOLL_ERROR_INVALID_ARGUMENT, "allreduce with op -1");
  check_result(arcoll_send(comm, f, sizeof f, size, 0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "send to rank == size");
  check_result(arcoll_recv(comm, f, sizeof f, -1, 0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "recv from rank -1");
  check_result(arcoll_send(comm, f, sizeof f, rank, 0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "send to this rank itself");
  check_result(arcoll_send(comm, f, sizeof f, (rank + 1) % size, -3), ARCOLL_ERROR_INVALID_ARGUMENT,
               "send with tag -3");
  check_result(arcoll_send(comm, NULL, 16, 0, 0), ARCOLL_ERROR_INVALID_ARGUMENT,
               "send 16 B from a NULL buffer");
}

/* A process that joins the survivors below (arcoll_comm_join): forked by rank 0 before its
 * communicator exists, it reads their address from `address_pipe`. Its exit code says whether
 * it joined as rank 3 of 4 and the grown group's sum came right. */
static pid_t start_newcomer(int* address_pipe) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid != 0) {
    close(fds[0]);
    *address_pipe = fds[1];
    return pid;
  }
  close(fds[1]);
  char address[128] = {0};
  if (read(fds[0], address, sizeof address - 1) <= 0) _exit(20);
  arcoll_comm_t* grown = NULL;
  const char* token = getenv("ARCOLL_JOB_TOKEN"); /* none set here: the job has none */
  if (arcoll_comm_join(address, token != NULL ? token : "", &grown) != ARCOLL_SUCCESS) _exit(21);
  int got_rank = -1, got_size = -1, one = 1;
  arcoll_comm_rank(grown, &got_rank);
  arcoll_comm_size(grown, &got_size);
  if (arcoll_allreduce(grown, &one, &one, 1, ARCOLL_I32, ARCOLL_SUM) != ARCOLL_SUCCESS) _exit(22);
  arcoll_comm_destroy(grown);
  _exit(got_rank == 3 && got_size == 4 && one == 4 ? 0 : 23);
}

/* The last rank gives up; the others' barrier fails, and they shrink to a communicator of
 * themselves, which works; a newcomer (rank 0's, `address_pipe`) then joins them. */
static void test_shrink_and_grow(arcoll_comm_t* comm, int rank, int size, int* address_pipe) {
  check_result(arcoll_comm_shrink(comm, NULL), ARCOLL_ERROR_INVALID_ARGUMENT,
               "arcoll_comm_shrink with no place for the result");
  if (rank == size - 1) {
    check_result(arcoll_comm_abort(comm, "the test leaves"), ARCOLL_SUCCESS, "abort to leave");
    return;
  }
  check_result(arcoll_barrier(comm), ARCOLL_ERROR_PEER_FAILURE, "barrier with a rank gone");
  arcoll_comm_t* survivors = NULL;
  if (!check_result(arcoll_comm_shrink(comm, &survivors), ARCOLL_SUCCESS, "arcoll_comm_shrink"))
    return;
  int got_rank = -1, got_size = -1, one = 1;
  arcoll_comm_rank(survivors, &got_rank);
  arcoll_comm_size(survivors, &got_size);
  check(got_rank == rank && got_size == size - 1, "shrunk: rank %d of %d", got_rank, got_size);
  check_result(arcoll_allreduce(survivors, &one, &one, 1, ARCOLL_I32, ARCOLL_SUM), ARCOLL_SUCCESS,
               "allreduce of the survivors");
  check(one == size - 1, "the survivors' sum is %d", one);
  char address[128];
  check_result(arcoll_comm_rendezvous_address(survivors, address, 4),
               ARCOLL_ERROR_INVALID_ARGUMENT, "rendezvous address into 4 bytes");
  if (check_result(arcoll_comm_rendezvous_address(survivors, address, sizeof address),
                   ARCOLL_SUCCESS, "arcoll_comm_rendezvous_address") &&
      *address_pipe >= 0) {
    check(write(*address_pipe, address, strlen(address)) == (ssize_t)strlen(address),
          "the address went to the newcomer");
    close(*address_pipe);
    *address_pipe = -1;
  }
  arcoll_comm_t* grown = NULL;
  if (check_result(arcoll_comm_grow(survivors, 1, &grown), ARCOLL_SUCCESS, "arcoll_comm_grow")) {
    one = 1;
    check_result(arcoll_allreduce(grown, &one, &one, 1, ARCOLL_I32, ARCOLL_SUM), ARCOLL_SUCCESS,
                 "allreduce with the newcomer");
    check(one == size, "the grown group's sum is %d", one);
    check_result(arcoll_comm_destroy(grown), ARCOLL_SUCCESS, "destroy the grown one");
  }
  check_result(arcoll_comm_destroy(survivors), ARCOLL_SUCCESS, "destroy the survivors' one");
}

static void run_rank(int rank, int size) {
  int address_pipe = -1;
  const pid_t newcomer = rank == 0 ? start_newcomer(&address_pipe) : -1;
  arcoll_comm_t* comm = NULL;
  if (!check_result(arcoll_comm_init_from_env(&comm), ARCOLL_SUCCESS, "arcoll_comm_init_from_env"))
    return;
  int got_rank = -1, got_size = -1, local_rank = -1, local_size = -1, node = -1, nodes = -1;
  arcoll_comm_rank(comm, &got_rank);
  arcoll_comm_size(comm, &got_size);
  arcoll_comm_local_rank(comm, &local_rank);
  arcoll_comm_local_size(comm, &local_size);
  arcoll_comm_node_id(comm, &node);
  arcoll_comm_node_count(comm, &nodes);
  check(got_rank == rank && got_size == size, "rank %d, size %d", got_rank, got_size);
  check(local_rank == rank && local_size == size && node == 0 && nodes == 1,
        "one host: local rank %d of %d, node %d of %d", local_rank, local_size, node, nodes);

  /* Each test returns 0 when a call failed: the ranks are then out of step, so stop. */
  int collectives_ok = test_allreduce(comm, rank, size);
  const size_t name_length = strlen(who);
  for (int nonblocking = 0; nonblocking <= 1 && collectives_ok; ++nonblocking) {
    if (nonblocking) snprintf(who + name_length, sizeof who - name_length, ", non-blocking");
    collectives_ok = test_reduce_scatter(comm, rank, size, nonblocking) &&
                     test_allgather(comm, rank, size, nonblocking) &&
                     test_broadcast(comm, rank, nonblocking) &&
                     test_rooted_and_alltoall(comm, rank, size, nonblocking);
  }
  who[name_length] = '\0';
  if (collectives_ok && test_nonblocking(comm, rank, size) &&
      test_parameter_server(comm, rank, size, ARCOLL_BSP) &&
      test_parameter_server(comm, rank, size, ARCOLL_ASP) &&
      test_shared_buffers(comm, rank, size)) {
    REQUIRE_SUCCESS(arcoll_barrier(comm), "barrier");
    if (test_point_to_point(comm, rank)) {
      REQUIRE_SUCCESS(arcoll_barrier(comm), "barrier after point-to-point");
      test_error_paths(comm, rank, size);
      /* The failed calls must have left the communicator usable. */
      int one = 1;
      REQUIRE_SUCCESS(arcoll_allreduce(comm, &one, &one, 1, ARCOLL_I32, ARCOLL_SUM),
                      "allreduce after the failed calls");
      check(one == size, "the communicator still works after the failed calls (sum %d)", one);
      test_shrink_and_grow(comm, rank, size, &address_pipe);
    }
  }
  check_result(arcoll_comm_destroy(comm), ARCOLL_SUCCESS, "arcoll_comm_destroy");
  if (newcomer > 0) {
    if (address_pipe >= 0) close(address_pipe); /* an earlier failure: the newcomer gives up */
    int status = 0;
    waitpid(newcomer, &status, 0);
    check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the newcomer joined and summed right "
          "(exit status %d)", status);
  }
}

/* ---- The parent ------------------------------------------------------------------------ */

static volatile sig_atomic_t timed_out = 0;
static void on_alarm(int signal) {
  (void)signal;
  timed_out = 1;
}

/* Runs `body` in a forked child using counter slot `slot`. */
static pid_t spawn(int slot, const char* name, void (*prepare)(int), int arg,
                   void (*body)(int, int), int a, int b) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid != 0) return pid;
  mine = &counters[slot];
  snprintf(who, sizeof who, "%s", name);
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGALRM, SIG_DFL); /* the parent's handler would only set a flag: die instead */
  alarm(kChildTimeoutSeconds);
  if (prepare != NULL) prepare(arg);
  body(a, b);
  mine->finished = 1;
  fflush(NULL);
  _exit(mine->failed == 0 ? 0 : 1);
}

static int listen_fd = -1;
static int listen_port = 0;

static void prepare_rank(int rank) {
  clear_launcher_environment(1);
  set_env_int("ARCOLL_RANK", rank);
  set_env_int("ARCOLL_WORLD_SIZE", kWorld);
  setenv("ARCOLL_MASTER_ADDR", "127.0.0.1", 1);
  set_env_int("ARCOLL_MASTER_PORT", listen_port);
  setenv("ARCOLL_TIMEOUT", "20", 1);
  if (rank == 0) {
    set_env_int("ARCOLL_STORE_LISTEN_FD", listen_fd);
  } else {
    close(listen_fd);
  }
}

static void world_of_one_body(int a, int b) {
  (void)a;
  (void)b;
  run_world_of_one();
}

static void rank_body(int rank, int size) {
  run_rank(rank, size);
}

/* Waits for the children; returns the number of failures not already counted. */
static int reap(pid_t* pids, const int* slots, const char* const* names, int n) {
  int extra_failures = 0;
  int remaining = n;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR && timed_out) {
        fprintf(stderr, "[parent] FAIL: still running after %d s; killing the children\n",
                kOverallTimeoutSeconds);
        for (int i = 0; i < n; ++i)
          if (pids[i] > 0) kill(pids[i], SIGKILL);
        timed_out = 0;
        continue;
      }
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < n; ++i) {
      if (pids[i] != pid) continue;
      pids[i] = -1;
      --remaining;
      const Counters* c = &counters[slots[i]];
      if (WIFSIGNALED(status)) {
        fprintf(stderr, "[parent] FAIL: %s killed by signal %d (%s)\n", names[i], WTERMSIG(status),
                strsignal(WTERMSIG(status)));
        ++extra_failures;
      } else if (WEXITSTATUS(status) != 0 && c->failed == 0) {
        fprintf(stderr, "[parent] FAIL: %s exited with code %d\n", names[i], WEXITSTATUS(status));
        ++extra_failures;
      } else if (!c->finished) {
        fprintf(stderr, "[parent] FAIL: %s exited before finishing its checks\n", names[i]);
        ++extra_failures;
      }
    }
  }
  return extra_failures;
}

static int open_listener(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in address;
  memset(&address, 0, sizeof address);
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (bind(fd, (struct sockaddr*)&address, sizeof address) != 0 || listen(fd, 128) != 0 ||
      getsockname(fd, (struct sockaddr*)&address, &length) != 0) {
    close(fd);
    return -1;
  }
  listen_port = ntohs(address.sin_port);
  return fd;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  counters = mmap(NULL, sizeof(Counters) * kSlots, PROT_READ | PROT_WRITE,
                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (counters == MAP_FAILED) {
    perror("mmap");
    return 2;
  }
  memset(counters, 0, sizeof(Counters) * kSlots);
  mine = &counters[kParentSlot];

  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_alarm; /* no SA_RESTART: waitpid returns EINTR */
  sigaction(SIGALRM, &action, NULL);
  alarm(kOverallTimeoutSeconds);

  printf("arcoll C API test, library version %s\n", arcoll_version());
  static const char* const tuning[] = {"ARCOLL_ALGO", "ARCOLL_TRANSPORT", "ARCOLL_CHUNK_BYTES",
                                       "ARCOLL_SOCKETS_PER_PEER", "ARCOLL_KERNEL_ISA"};
  for (size_t i = 0; i < sizeof tuning / sizeof *tuning; ++i)
    if (getenv(tuning[i]) != NULL)
      printf("%s=%s (used by the 4-rank run)\n", tuning[i], getenv(tuning[i]));

  /* 1 */
  test_without_communicator();

  /* 2 */
  {
    pid_t pid = spawn(kSoloSlot, "world of one", NULL, 0, world_of_one_body, 0, 0);
    int slot = kSoloSlot;
    const char* name = "world of one";
    if (pid < 0)
      check(0, "fork: %s", strerror(errno));
    else
      mine->failed += reap(&pid, &slot, &name, 1);
  }

  /* 3 */
  listen_fd = open_listener();
  if (listen_fd < 0) {
    check(0, "listening socket on 127.0.0.1: %s", strerror(errno));
  } else {
    pid_t pids[kWorld];
    int slots[kWorld];
    char names[kWorld][16];
    const char* name_ptrs[kWorld];
    int started = 0;
    for (int r = 0; r < kWorld; ++r) {
      snprintf(names[r], sizeof names[r], "rank %d", r);
      name_ptrs[r] = names[r];
      slots[r] = r;
      pids[r] = spawn(r, names[r], prepare_rank, r, rank_body, r, kWorld);
      if (pids[r] < 0) {
        check(0, "fork: %s", strerror(errno));
        break;
      }
      ++started;
    }
    close(listen_fd); /* rank 0 owns it now */
    mine->failed += reap(pids, slots, name_ptrs, started);
  }
  alarm(0);

  int passed = 0, failed = 0;
  for (int i = 0; i < kSlots; ++i) {
    passed += counters[i].passed;
    failed += counters[i].failed;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
