// Under mpirun with no rendezvous address given, rank 0 opens the store's listening socket
// and its address reaches the other ranks through MPI_Bcast. Only when built with MPI.
#pragma once

#include "arcoll/launch.hpp"

namespace arcoll::mpi_bootstrap {

bool available();
// Fills info.master_addr/master_port (and, on rank 0, info.store_listen_fd).
void share_master_address(LaunchInfo& info);

}  // namespace arcoll::mpi_bootstrap
