// Built when arcoll has no MPI: the launcher's variables must carry the rendezvous address.
#include "src/core/mpi_bootstrap.hpp"

#ifndef ARCOLL_HAVE_MPI
namespace arcoll::mpi_bootstrap {
bool available() {
  return false;
}
void share_master_address(LaunchInfo&) {}
}  // namespace arcoll::mpi_bootstrap
#endif
