// Where this process stands in a job: rank, world size and the rendezvous address, read from
// the environment of whichever launcher started it.
#pragma once

#include <string>

namespace arcoll {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;  // -1 when the launcher did not say
  int local_size = -1;
  std::string master_addr;  // rendezvous store host (rank 0); may be empty for world size 1
  int master_port = 0;
  int store_listen_fd = -1;  // a listening socket handed to rank 0 by the local launcher
  // The store listened before its address was given out (split, shrink): a refused
  // connection means its rank is gone, not late.
  bool store_listening = false;
  // Readable once the store's rank is known to have died (shrink): waits for the store's answers
  // while joining end then, however long their deadline. -1: none.
  int store_gone_fd = -1;
  // The job's secret: only processes that know it may connect (ARCOLL_JOB_TOKEN; made by the
  // local launcher and, under mpirun, by rank 0 and shared through MPI). Empty: none.
  std::string job_token;
  std::string source;  // "arcoll", "openmpi", "pmix", "pmi", "slurm", "torchrun", "default"
};

// Detects rank and size from, in order: ARCOLL_*, Open MPI, PMIx, PMI, Slurm, torchrun.
// With none of them the process is a world of one. Throws ConfigurationError when the
// variables are inconsistent or the rendezvous address is missing for a world above one
// (after trying MPI when arcoll was built with it).
LaunchInfo detect_launch();

}  // namespace arcoll
