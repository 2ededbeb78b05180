/* All-reduce an array of floats across every rank of a job, through the C API.
 *
 * Runs under any launcher arcoll recognises, exactly like the C++ example:
 *
 *   mpirun -np 2 ./example_allreduce_c
 *   torchrun --nproc_per_node 2 --no_python --redirects 1 --tee 1 ./example_allreduce_c
 *   ARCOLL_RANK=0 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_allreduce_c &
 *   ARCOLL_RANK=1 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_allreduce_c
 */
#include <arcoll/arcoll.h>

#include <stdio.h>

/* Every call returns a result code; on failure arcoll_last_error() has the whole story. */
#define CHECK(call)                                                                 \
  do {                                                                              \
    arcoll_result_t result_ = (call);                                               \
    if (result_ != ARCOLL_SUCCESS) {                                                \
      fprintf(stderr, "%s failed (%s): %s\n", #call, arcoll_result_string(result_), \
              arcoll_last_error());                                                 \
      arcoll_comm_destroy(comm);                                                    \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int main(void) {
  arcoll_comm_t* comm = NULL;
  int rank = 0, size = 0;

  /* Joins the job: blocks until every rank has arrived (or ARCOLL_TIMEOUT expires). */
  CHECK(arcoll_comm_init_from_env(&comm));
  CHECK(arcoll_comm_rank(comm, &rank));
  CHECK(arcoll_comm_size(comm, &size));

  /* Rank r contributes r + i at index i. */
  float values[8];
  for (int i = 0; i < 8; ++i) values[i] = (float)(rank + i);

  /* In place (send == recv): afterwards every rank holds the element-wise sum. */
  CHECK(arcoll_allreduce(comm, values, values, 8, ARCOLL_F32, ARCOLL_SUM));

  if (rank == 0) {
    printf("sum over %d ranks:", size);
    for (int i = 0; i < 8; ++i) printf(" %g", values[i]);
    printf("\n");
  }

  arcoll_comm_destroy(comm);
  return 0;
}
