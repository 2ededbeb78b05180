#include "src/core/mpi_bootstrap.hpp"

#include "src/base/auth.hpp"

#include <mpi.h>

#include <cstdlib>
#include <cstring>

#include "arcoll/error.hpp"
#include "src/base/env.hpp"
#include "src/base/socket.hpp"

namespace arcoll::mpi_bootstrap {
namespace {

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// Where rank 0 listens: loopback when the whole job is on this host, else the chosen
// interface or the first non-loopback one.
std::string listen_address(const LaunchInfo& info) {
  if (auto ifname = env::get("ARCOLL_SOCKET_IFNAME")) return net::interface_address(*ifname);
  if (info.local_size == info.world_size) return "127.0.0.1";
  return net::first_external_address();
}

}  // namespace

bool available() {
  return true;
}

void share_master_address(LaunchInfo& info) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    if (MPI_Init(nullptr, nullptr) != MPI_SUCCESS)
      throw ConfigurationError("launch", "MPI_Init failed while sharing rank 0's address",
                               info.rank);
    std::atexit(finalize_at_exit);
  }
  char address[128] = {};
  if (info.rank == 0) {
    net::Fd listener = net::listen_on(listen_address(info), 0);
    net::Endpoint endpoint = net::local_endpoint(listener.get());
    std::snprintf(address, sizeof address, "%s:%d", endpoint.host.c_str(), endpoint.port);
    info.store_listen_fd = listener.release();
  }
  MPI_Bcast(address, sizeof address, MPI_CHAR, 0, MPI_COMM_WORLD);
  // The job's token, made by rank 0 unless the user gave one: MPI's channel is the job's own.
  char token[128] = {};
  if (info.rank == 0) {
    const std::string chosen = info.job_token.empty() ? auth::new_token() : info.job_token;
    std::snprintf(token, sizeof token, "%s", chosen.c_str());
  }
  MPI_Bcast(token, sizeof token, MPI_CHAR, 0, MPI_COMM_WORLD);
  info.job_token = token;
  net::Endpoint endpoint;
  if (!net::parse_endpoint(address, endpoint))
    throw ConfigurationError("launch", "rank 0 sent a malformed address through MPI", info.rank);
  info.master_addr = endpoint.host;
  info.master_port = endpoint.port;
}

}  // namespace arcoll::mpi_bootstrap
