#include "arbench/backends/backend.hpp"

#include <cstdint>

namespace arbench {

std::optional<std::string> Backend::unsupported(arcoll::DataType, arcoll::ReduceOp) const {
  return std::nullopt;
}

void Backend::stage_in(const void*, void*, std::size_t) {}

void Backend::stage_out(void*, std::size_t) {}

void check_backend_built(const std::string& name) {
  if (name == "arcoll" || name == "memcpy") return;
  if (name == "mpi") {
#ifndef ARBENCH_WITH_MPI
    throw BackendUsageError("arbench was built without MPI (install libopenmpi-dev)");
#endif
    return;
  }
  if (name == "gloo") {
#ifndef ARBENCH_WITH_GLOO
    throw BackendUsageError("arbench was built without Gloo (install libgloo-dev)");
#endif
    return;
  }
  if (name == "nccl") {
#ifndef ARBENCH_WITH_NCCL
    throw BackendUsageError("arbench was built without NCCL (needs the CUDA toolkit and NCCL)");
#endif
    return;
  }
  std::string known;
  for (const char* n : kBackendNames) known += std::string(known.empty() ? "" : ", ") + n;
  throw BackendUsageError("unknown backend '" + name + "' (known: " + known + ")");
}

bool backend_needs_mpirun(const std::string& name) {
  return name == "mpi";
}

std::unique_ptr<Backend> make_backend(const std::string& name, arcoll::Communicator& comm,
                                      const BackendOptions& options) {
  check_backend_built(name);
  (void)options;
  if (name == "arcoll") return make_arcoll_backend(comm);
  if (name == "memcpy") return make_memcpy_backend(comm);
#ifdef ARBENCH_WITH_MPI
  if (name == "mpi") return make_mpi_backend(comm);
#endif
#ifdef ARBENCH_WITH_GLOO
  if (name == "gloo") return make_gloo_backend(comm, options);
#endif
#ifdef ARBENCH_WITH_NCCL
  if (name == "nccl") return make_nccl_backend(comm);
#endif
  throw BackendUsageError("unknown backend '" + name + "'");
}

}  // namespace arbench
