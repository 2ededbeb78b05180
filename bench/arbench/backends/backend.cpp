#include "arbench/backends/backend.hpp"

#include <cstdint>
#include <map>

namespace arbench {

std::optional<std::string> Backend::unsupported(Coll, arcoll::DataType, arcoll::ReduceOp) const {
  return std::nullopt;
}

void Backend::stage_in(const void*, void*, std::size_t) {}

void Backend::stage_out(void*, std::size_t) {}

namespace {

template <typename T>
void divide(void* buffer, std::size_t count, int ranks) {
  T* p = static_cast<T*>(buffer);
  const T d = static_cast<T>(ranks);
  for (std::size_t i = 0; i < count; ++i) p[i] /= d;
}

}  // namespace

void divide_by_ranks(void* buffer, std::size_t count, arcoll::DataType type, int ranks) {
  if (type == arcoll::DataType::f32) divide<float>(buffer, count, ranks);
  if (type == arcoll::DataType::f64) divide<double>(buffer, count, ranks);
  if (type == arcoll::DataType::f16) {
    auto* p = static_cast<std::uint16_t*>(buffer);
    for (std::size_t i = 0; i < count; ++i)
      p[i] = arcoll::float_to_half(arcoll::half_to_float(p[i]) / static_cast<float>(ranks));
  }
}

namespace {

// Peers that register only when their library was found, and what the others need.
const std::map<std::string, std::string> kPeersNotBuilt = {
    {"mpi", "arbench was built without MPI (install libopenmpi-dev)"},
    {"gloo", "arbench was built without Gloo (install libgloo-dev)"},
    {"nccl", "arbench was built without NCCL (needs the CUDA toolkit and NCCL)"},
};

}  // namespace

void check_backend_built(const std::string& name) {
  if (BackendRegistry::instance().find(name) != nullptr) return;
  if (const auto peer = kPeersNotBuilt.find(name); peer != kPeersNotBuilt.end())
    throw BackendUsageError(peer->second);
  std::string known = BackendRegistry::instance().name_list();
  for (const auto& [peer, why] : kPeersNotBuilt)
    if (BackendRegistry::instance().find(peer) == nullptr) known += ", " + peer;
  throw BackendUsageError("unknown backend '" + name + "' (known: " + known + ")");
}

bool backend_needs_mpirun(const std::string& name) {
  const BackendRegistration* backend = BackendRegistry::instance().find(name);
  return backend != nullptr && backend->needs_mpirun;
}

std::unique_ptr<Backend> make_backend(const std::string& name, arcoll::Communicator& comm,
                                      const BackendOptions& options) {
  check_backend_built(name);
  return BackendRegistry::instance().find(name)->make(comm, options);
}

}  // namespace arbench
