/* Non-blocking collectives through the C API, and what its errors look like: a call that is
 * wrong fails at once with a code and a message, and the communicator stays usable.
 *
 *   ARCOLL_RANK=0 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_nonblocking_c &
 *   ARCOLL_RANK=1 ARCOLL_WORLD_SIZE=2 ARCOLL_MASTER_ADDR=127.0.0.1 ./example_nonblocking_c
 */
#include <arcoll/arcoll.h>

#include <stdio.h>

#define COUNT 1000

/* On failure: the code's name and arcoll_last_error(), which says what failed and where. */
#define CHECK(call)                                                                 \
  do {                                                                              \
    arcoll_result_t result_ = (call);                                               \
    if (result_ != ARCOLL_SUCCESS) {                                                \
      fprintf(stderr, "%s failed (%s): %s\n", #call, arcoll_result_string(result_), \
              arcoll_last_error());                                                 \
      arcoll_work_free(work);                                                       \
      arcoll_comm_destroy(comm);                                                    \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int main(void) {
  arcoll_comm_t* comm = NULL;
  arcoll_work_t* work = NULL;
  int rank = 0, size = 0, done = 0, polls = 0;
  static double values[COUNT];
  static int counts[COUNT];

  CHECK(arcoll_comm_init_from_env(&comm));
  CHECK(arcoll_comm_rank(comm, &rank));
  CHECK(arcoll_comm_size(comm, &size));

  /* A wrong call (an average of integers) is refused before it starts anything: every rank
   * gets the same code, so none of them waits for the others. */
  arcoll_result_t refused =
      arcoll_iallreduce(comm, counts, counts, COUNT, ARCOLL_I32, ARCOLL_AVG, &work);
  if (refused != ARCOLL_ERROR_INVALID_ARGUMENT || work != NULL) {
    fprintf(stderr, "an average of integers was not refused\n");
    return 1;
  }
  if (rank == 0)
    printf("refused as expected (%s): %s\n", arcoll_result_string(refused), arcoll_last_error());

  /* Rank r contributes r * i at index i; the call runs while this thread polls. */
  for (int i = 0; i < COUNT; ++i) values[i] = (double)rank * i;
  CHECK(arcoll_iallreduce(comm, values, values, COUNT, ARCOLL_F64, ARCOLL_SUM, &work));
  while (!done) {
    CHECK(arcoll_work_test(work, &done));
    ++polls; /* here a program would do something useful */
  }
  CHECK(arcoll_work_wait(work)); /* the call's own result: success or why it failed */
  arcoll_work_free(work);
  work = NULL;

  /* The sum of r * i over ranks r is i * size * (size - 1) / 2. */
  int wrong = 0;
  for (int i = 0; i < COUNT; ++i) wrong += values[i] != (double)i * size * (size - 1) / 2;
  if (rank == 0)
    printf("nonblocking_c: %s: %d ranks, %d polls\n", wrong ? "WRONG" : "ok", size, polls);
  arcoll_comm_destroy(comm);
  return wrong ? 1 : 0;
}
