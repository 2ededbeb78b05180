#include "arcoll/launch.hpp"

#include "arcoll/error.hpp"
#include "src/base/env.hpp"
#include "src/core/mpi_bootstrap.hpp"

namespace arcoll {
namespace {

constexpr int kDefaultMasterPort = 29511;

int require_int(const char* name, const char* source) {
  auto value = env::get_int(name);
  if (!value)
    throw ConfigurationError("launch", std::string(source) + " set the rank but not " + name);
  return static_cast<int>(*value);
}

int int_or(const char* name, int fallback) {
  auto value = env::get_int(name);
  return value ? static_cast<int>(*value) : fallback;
}

// Rank and size from the first launcher whose variables are present.
LaunchInfo rank_and_size() {
  LaunchInfo info;
  if (env::get("ARCOLL_RANK")) {
    info.rank = require_int("ARCOLL_RANK", "ARCOLL_RANK");
    info.world_size = require_int("ARCOLL_WORLD_SIZE", "ARCOLL_RANK");
    info.local_rank = int_or("ARCOLL_LOCAL_RANK", -1);
    info.local_size = int_or("ARCOLL_LOCAL_SIZE", -1);
    info.source = "arcoll";
  } else if (env::get("OMPI_COMM_WORLD_RANK")) {
    info.rank = require_int("OMPI_COMM_WORLD_RANK", "Open MPI");
    info.world_size = require_int("OMPI_COMM_WORLD_SIZE", "Open MPI");
    info.local_rank = int_or("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    info.local_size = int_or("OMPI_COMM_WORLD_LOCAL_SIZE", -1);
    info.source = "openmpi";
  } else if (env::get("SLURM_PROCID") && env::get("SLURM_NTASKS")) {
    info.rank = require_int("SLURM_PROCID", "Slurm");
    info.world_size = require_int("SLURM_NTASKS", "Slurm");
    info.local_rank = int_or("SLURM_LOCALID", -1);
    if (auto tasks = env::get("SLURM_NTASKS_PER_NODE");
        tasks && tasks->find_first_not_of("0123456789") == std::string::npos)
      info.local_size = std::stoi(*tasks);
    info.source = "slurm";
  } else if (env::get("PMI_RANK") && env::get("PMI_SIZE")) {
    info.rank = require_int("PMI_RANK", "PMI");
    info.world_size = require_int("PMI_SIZE", "PMI");
    info.local_rank = int_or("MPI_LOCALRANKID", -1);
    info.local_size = int_or("MPI_LOCALNRANKS", -1);
    info.source = "pmi";
  } else if (env::get("PMIX_RANK")) {
    info.rank = require_int("PMIX_RANK", "PMIx");
    auto size = env::get_int("PMIX_SIZE");
    if (!size)
      throw ConfigurationError("launch",
                               "PMIx gave this process rank " + std::to_string(info.rank) +
                                   " but no world size; set ARCOLL_WORLD_SIZE and ARCOLL_RANK");
    info.world_size = static_cast<int>(*size);
    info.source = "pmix";
  } else if (env::get("RANK") && env::get("WORLD_SIZE")) {
    info.rank = require_int("RANK", "torchrun");
    info.world_size = require_int("WORLD_SIZE", "torchrun");
    info.local_rank = int_or("LOCAL_RANK", -1);
    info.local_size = int_or("LOCAL_WORLD_SIZE", -1);
    info.source = "torchrun";
  } else {
    info.source = "default";
  }
  return info;
}

}  // namespace

LaunchInfo detect_launch() {
  LaunchInfo info = rank_and_size();
  if (info.world_size < 1 || info.rank < 0 || info.rank >= info.world_size)
    throw ConfigurationError("launch", "rank " + std::to_string(info.rank) + " and world size " +
                                           std::to_string(info.world_size) + " from " +
                                           info.source + " are inconsistent");
  if (auto addr = env::get("ARCOLL_MASTER_ADDR"))
    info.master_addr = *addr;
  else if (auto addr = env::get("MASTER_ADDR"))
    info.master_addr = *addr;
  if (auto port = env::get_int("ARCOLL_MASTER_PORT")) info.master_port = static_cast<int>(*port);
  // torch's own store (torchrun's agent, or the job's process group) holds MASTER_PORT on
  // rank 0's host; ours takes the next port.
  else if (auto port = env::get_int("MASTER_PORT"))
    info.master_port = static_cast<int>(*port) + 1;
  if (info.master_port == 0) info.master_port = kDefaultMasterPort;
  if (info.master_port < 0 || info.master_port > 65535)
    throw ConfigurationError(
        "launch", "master port " + std::to_string(info.master_port) + " is not a TCP port");
  if (auto token = env::get("ARCOLL_JOB_TOKEN")) info.job_token = *token;
  if (info.rank == 0)
    if (auto fd = env::get_int("ARCOLL_STORE_LISTEN_FD"))
      info.store_listen_fd = static_cast<int>(*fd);

  if (info.world_size > 1 && info.master_addr.empty()) {
    if (mpi_bootstrap::available() && info.source != "arcoll" && info.source != "torchrun") {
      mpi_bootstrap::share_master_address(info);
    } else {
      throw ConfigurationError(
          "launch",
          "a world of " + std::to_string(info.world_size) + " ranks (from " + info.source +
              ") needs a rendezvous address: set ARCOLL_MASTER_ADDR to the host of "
              "rank 0 (and ARCOLL_MASTER_PORT, default " +
              std::to_string(kDefaultMasterPort) + ")" +
              (mpi_bootstrap::available() ? ""
                                          : "; this arcoll was built without MPI, so "
                                            "it cannot learn it through mpirun"),
          info.rank);
    }
  }
  return info;
}

}  // namespace arcoll
