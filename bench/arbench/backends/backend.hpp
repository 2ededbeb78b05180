// What the sweep measures: one implementation of the collectives behind a small interface, so
// that the same timing loop and the same check run through arcoll, MPI, Gloo or NCCL.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arbench/collectives.hpp"
#include "arcoll/communicator.hpp"
#include "arcoll/parameter_server.hpp"
#include "arcoll/tuning.hpp"
#include "arcoll/types.hpp"
#include "src/base/registry.hpp"

namespace arbench {

// One call of a collective on this rank's buffers (their shapes: collectives.hpp). `count` is
// the call's count argument: elements per rank's block for the collectives that split a row.
// send == recv, or one inside the other at its block, is the collective's in-place form.
struct Call {
  Coll coll = Coll::allreduce;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  arcoll::DataType type = arcoll::DataType::f32;
  arcoll::ReduceOp op = arcoll::ReduceOp::sum;
  int root = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "arcoll", "mpi", "gloo", "nccl", "memcpy".
  virtual std::string name() const = 0;
  // One line for the table's header: what exactly runs ("MPI_Allreduce, Open MPI v4.1.4").
  virtual std::string description() const = 0;
  // Why `coll` with `type` and `op` cannot run through this backend, or nullopt when it can.
  // Every rank gets the same answer.
  virtual std::optional<std::string> unsupported(Coll coll, arcoll::DataType type,
                                                 arcoll::ReduceOp op) const;

  // Runs the call. The pointers are the host buffers of the sweep (see stage_in).
  virtual void run(const Call& call) = 0;
  // All ranks of this backend meet.
  virtual void barrier() = 0;

  // False for a reference that copies without reducing (memcpy): its rows are not checked.
  virtual bool reduces() const { return true; }
  // arcoll's own: under --shared-buffers its buffers come from arcoll::mem_alloc, while the
  // peers keep heap memory (each library's own best).
  virtual bool is_arcoll() const { return false; }
  // busbw / algbw: nccl-tests' factor of the collective (collectives.hpp).
  virtual double bus_factor(Coll coll, int world_size) const {
    return arbench::bus_factor(coll, world_size);
  }

  // Backends that compute in other memory (a GPU) copy the host inputs there before the timed
  // iterations (stage_in) and the result back before it is checked (stage_out); allreduce then
  // maps the host addresses to its own buffers. Host backends do nothing.
  virtual void stage_in(const void* send, void* recv, std::size_t bytes);
  virtual void stage_out(void* recv, std::size_t bytes);
};

// The backend cannot run on this machine (no GPU): the run reports it as skipped, exit code 0.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The backend was not compiled in, or a setting is wrong: a usage error (exit code 2).
class BackendUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BackendOptions {
  std::string gloo_algorithm = "ring_chunked";  // ring, ring_chunked, halving_doubling, bcube
};

// Backends register themselves, one file each; a peer's file is built only when its library
// was found.
struct BackendRegistration {
  static constexpr const char* kKind = "backend";
  std::string name;
  bool needs_mpirun = false;  // its ranks must be started by mpirun
  // Creates the backend on every rank (a collective call over the communicator, which the
  // sweep also uses for its own coordination).
  std::function<std::unique_ptr<Backend>(arcoll::Communicator&, const BackendOptions&)> make;
};
using BackendRegistry = arcoll::Registry<BackendRegistration>;
using BackendRegistrar = arcoll::Registrar<BackendRegistration>;

// Memory other than the host's that arcoll's buffers can live in (--device): wraps a backend so
// that its calls run on buffers there, copied in and out around the timed calls as NCCL's are.
// One file each, built when its library is found.
struct DeviceRegistration {
  static constexpr const char* kKind = "device";
  std::string name;
  // On every rank (collective): `host` on this rank's device, or BackendUnavailable naming why
  // some rank has none.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend> host, arcoll::Communicator&)>
      wrap;
};
using DeviceRegistry = arcoll::Registry<DeviceRegistration>;
using DeviceRegistrar = arcoll::Registrar<DeviceRegistration>;

inline constexpr const char* kGlooAlgorithms[] = {"ring", "ring_chunked", "halving_doubling",
                                                  "bcube"};

// Throws BackendUsageError when `name` is unknown or not built into this arbench. Runs before
// any rank starts.
void check_backend_built(const std::string& name);
// True when the backend needs its ranks started by mpirun.
bool backend_needs_mpirun(const std::string& name);

// The backend `name` on every rank (collective). Throws BackendUnavailable or
// BackendUsageError as above.
std::unique_ptr<Backend> make_backend(const std::string& name, arcoll::Communicator& comm,
                                      const BackendOptions& options);

// `--algo ps` on the workers: a parameter server over `job` (the workers and, last,
// `dedicated` server ranks, which serve it with sweep_parameter_server_options), tensors cut
// into `piece_bytes` pieces, named "arcoll/ps". Collective over the job.
std::unique_ptr<Backend> make_parameter_server_backend(arcoll::Communicator& workers,
                                                       arcoll::Communicator& job, int dedicated,
                                                       std::size_t piece_bytes);
arcoll::ParameterServerOptions sweep_parameter_server_options(const arcoll::Communicator& job,
                                                              int dedicated,
                                                              std::size_t piece_bytes);

// avg for peers that only sum: divides `count` elements of f32, f64 or f16 by `ranks`.
void divide_by_ranks(void* buffer, std::size_t count, arcoll::DataType type, int ranks);

// arcoll itself; with an algorithm ("ring", "auto"), that one, named "arcoll/<algorithm>".
std::unique_ptr<Backend> make_arcoll_backend(arcoll::Communicator& comm,
                                             const std::string& algorithm = "");
// arcoll with other settings beside the sweep's own (--transport shm,ucx): a communicator of
// its own over comm's ranks (collective), named "arcoll:<transport>", whose cost model takes
// its own layout's link costs under `calibration` (without a tuning file).
inline constexpr const char* kArcollOver = "arcoll:";
std::unique_ptr<Backend> make_arcoll_backend_over(arcoll::Communicator& comm,
                                                  const arcoll::Options& options,
                                                  arcoll::Calibration calibration);

}  // namespace arbench
