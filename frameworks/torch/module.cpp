// The arcoll_torch Python module: importing it registers "arcoll" with torch.distributed, so
// that init_process_group("arcoll", ...) makes an arcoll process group (process_group.hpp).
#include <pybind11/chrono.h>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <pybind11/eval.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "arcoll/communicator.hpp"
#include "arcoll/options.hpp"
#include "arcoll/types.hpp"
#include "frameworks/torch/process_group.hpp"
#include "frameworks/torch/shared_tensors.hpp"
#include "frameworks/torch/tensors.hpp"

namespace py = pybind11;
using arcoll::torch_backend::ProcessGroupArcoll;

namespace {

// Makes a backend (GIL released) and gathers every rank's global rank in torch.distributed
// (-1: a newcomer, which has none), for torch's tables of the group made of it.
template <class Make>
py::tuple with_global_ranks(Make make, int global_rank) {
  c10::intrusive_ptr<ProcessGroupArcoll> backend;
  std::vector<std::int32_t> global_ranks;
  {
    py::gil_scoped_release released;
    backend = make();
    global_ranks.resize(static_cast<std::size_t>(backend->communicator().size()));
    const std::int32_t mine = global_rank;
    backend->communicator().allgather(&mine, global_ranks.data(), 1, arcoll::DataType::i32);
  }
  return py::make_tuple(backend, global_ranks);
}

}  // namespace

PYBIND11_MODULE(arcoll_torch, m) {
  m.doc() =
      "arcoll as a torch.distributed backend: import arcoll_torch, then "
      "torch.distributed.init_process_group(\"arcoll\", ...).";
  // The base class must be known before ours derives from it.
  py::module_::import("torch.distributed");

  py::class_<ProcessGroupArcoll, arcoll::torch_backend::TorchBackend,
             c10::intrusive_ptr<ProcessGroupArcoll>>(
      m, "ProcessGroupArcoll",
      "A torch.distributed process group whose collectives are arcoll's non-blocking calls.")
      .def_property_readonly(
          "transport", [](ProcessGroupArcoll& pg) { return pg.communicator().transport_name(); },
          "The transports in use (\"shm\", \"shm+tcp\").")
      .def_property_readonly(
          "algorithm", [](ProcessGroupArcoll& pg) { return pg.communicator().algorithm_name(); },
          "The all-reduce algorithm, or which sizes take which under auto.")
      .def(
          "set_algorithm",
          [](ProcessGroupArcoll& pg, const std::string& name) {
            pg.communicator().set_algorithm(name);
          },
          py::arg("name"), py::call_guard<py::gil_scoped_release>(),
          "The algorithm of the calls that follow (\"auto\", \"ring\", ...); every rank alike.")
      .def(
          "set_wire",
          [](ProcessGroupArcoll& pg, const std::string& wire) {
            const auto type = arcoll::parse_data_type(wire);
            if (!type) throw std::invalid_argument("arcoll: wire '" + wire + "' is not f32, f16 or bf16");
            pg.communicator().set_wire(*type);
          },
          py::arg("wire"), py::call_guard<py::gil_scoped_release>(),
          "Carry float32 reductions as f16 or bf16 on the wire (f32: as they are); every rank "
          "alike.")
      .def("abort", &ProcessGroupArcoll::abort, py::arg("reason") = "abort() called from Python",
           py::call_guard<py::gil_scoped_release>(),
           "Gives up: every rank's calls fail at once naming this rank and the reason.")
      .def(
          "_shrink",
          [](ProcessGroupArcoll& pg, int global_rank) {
            return with_global_ranks([&] { return pg.shrink(); }, global_rank);
          },
          py::arg("global_rank"),
          "The backend of the live ranks after a failure, and each one's global rank "
          "(arcoll_torch.shrink makes a group of it).")
      .def(
          "_grow",
          [](ProcessGroupArcoll& pg, const c10::intrusive_ptr<c10d::Store>& store,
             const std::string& key, int wait_for, int global_rank) {
            return with_global_ranks([&] { return pg.grow(store, key, wait_for); },
                                     global_rank);
          },
          py::arg("store"), py::arg("key"), py::arg("wait_for"), py::arg("global_rank"),
          "The backend of the members and the newcomers, and each one's global rank (-1 for a "
          "newcomer; arcoll_torch.grow makes a group of it).")
      .def_static(
          "_join",
          [](const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
             std::chrono::milliseconds timeout) {
            return with_global_ranks([&] { return ProcessGroupArcoll::join(store, key, timeout); },
                                     -1);
          },
          py::arg("store"), py::arg("key"), py::arg("timeout"),
          "A newcomer's backend in the group named at `key` of `store`, and each rank's global "
          "rank (arcoll_torch.join makes a group of it).");

  m.def(
      "configure",
      [](std::optional<std::string> algorithm, std::optional<std::string> wire,
         std::optional<bool> error_feedback, std::optional<bool> checksum,
         std::optional<std::string> timeline) {
        auto& s = arcoll::torch_backend::settings();
        if (algorithm) s.algorithm = algorithm;
        if (wire) s.wire = wire;
        if (error_feedback) s.error_feedback = error_feedback;
        if (checksum) s.checksum = checksum;
        if (timeline) s.timeline = timeline;
      },
      py::arg("algorithm") = py::none(), py::arg("wire") = py::none(),
      py::arg("error_feedback") = py::none(), py::arg("checksum") = py::none(),
      py::arg("timeline") = py::none(),
      "Settings of the process groups made from now on, over the environment's (ARCOLL_ALGO, "
      "ARCOLL_WIRE, ARCOLL_WIRE_ERROR_FEEDBACK, ARCOLL_CHECKSUM, ARCOLL_TIMELINE): the "
      "all-reduce algorithm, a 16-bit wire format for float32 reductions with optional error "
      "feedback, CRC32C checks of every message, and a Chrome trace of every call per rank.");

  m.def(
      "share_cpu_tensors",
      [](const py::object& min_bytes) {
        std::size_t bytes = 0;
        if (py::isinstance<py::str>(min_bytes)) {
          const auto parsed = arcoll::parse_byte_size(min_bytes.cast<std::string>());
          if (!parsed)
            throw std::invalid_argument("arcoll: share_cpu_tensors: '" +
                                        min_bytes.cast<std::string>() +
                                        "' is not a size (1M, 256K, 4096)");
          bytes = *parsed;
        } else {
          const long long value = min_bytes.cast<long long>();
          if (value < 0) throw std::invalid_argument("arcoll: share_cpu_tensors: a negative size");
          bytes = static_cast<std::size_t>(value);
        }
        arcoll::torch_backend::share_cpu_tensors(bytes);
      },
      py::arg("min_bytes") = "1M",
      "Zero-copy buckets: CPU tensors of min_bytes or more made from now on (DDP's buckets and "
      "gradients, FSDP's shards) lie in memory the ranks of a host read from each other in "
      "place; 0 turns it off. Each such tensor holds a memfd and a file descriptor while it "
      "lives. ARCOLL_TORCH_SHARED_TENSORS=1M sets it at import.");
  m.def("shared_cpu_tensor_bytes", &arcoll::torch_backend::shared_cpu_tensor_bytes,
        "The threshold of share_cpu_tensors in force, 0 when off.");
  m.def("is_shared", &arcoll::torch_backend::is_shared, py::arg("tensor"),
        "Whether the tensor's storage lies in memory shared by share_cpu_tensors.");
  if (const char* value = std::getenv("ARCOLL_TORCH_SHARED_TENSORS"); value && *value) {
    const auto bytes = arcoll::parse_byte_size(value);
    if (!bytes)
      throw std::invalid_argument(std::string("arcoll: ARCOLL_TORCH_SHARED_TENSORS='") + value +
                                  "' is not a size (1M, 256K, 4096; 0: off)");
    arcoll::torch_backend::share_cpu_tensors(*bytes);
  }

  // shrink, grow and join in Python: the group torch's calls take differs between torch 1.13
  // (the backend itself) and 2.x (a ProcessGroup holding backends per device), and
  // torch.distributed keeps each group's ranks in its own tables, which its functions
  // (get_rank(group), all_reduce(..., group=...)) read.
  py::exec(R"(
def _group_of(backend, global_ranks):
    """`backend` as a group torch's calls take: itself on torch 1.13, a ProcessGroup holding it
    on 2.x; in torch's tables with its members' global ranks."""
    import torch
    import torch.distributed
    from torch.distributed import distributed_c10d as c10d
    ranks = {g: r for r, g in enumerate(global_ranks) if g >= 0}
    name = "arcoll_" + str(id(backend))
    if not hasattr(c10d, "_world"):  # torch 1.13: the backend is the group
        c10d._pg_map[backend] = (c10d.Backend("arcoll"), None)
        c10d._pg_names[backend] = name
        c10d._pg_group_ranks[backend] = ranks
        return backend
    pg = torch.distributed.ProcessGroup(torch.distributed.HashStore(), backend.rank(),
                                        backend.size())
    custom = torch.distributed.ProcessGroup.BackendType.CUSTOM
    pg._set_default_backend(custom)
    pg._register_backend(torch.device("cpu"), custom, backend)
    pg._set_group_name(name)
    c10d._world.pg_map[pg] = ("arcoll", None)
    c10d._world.pg_names[pg] = name
    c10d._world.pg_group_ranks[pg] = ranks
    c10d._world.pg_backend_config[pg] = "cpu:arcoll"
    c10d._register_process_group(name, pg)
    return pg


def _backend_of(group):
    import torch
    from torch.distributed import distributed_c10d as c10d
    group = group if group is not None else c10d._get_default_group()
    return group if isinstance(group, ProcessGroupArcoll) else group._get_backend(
        torch.device("cpu"))


def shrink(group=None):
    """After a failed collective (a rank died, was stopped past the timeout, or aborted): a new
    process group of the live ranks, renumbered in the old order, for DDP(process_group=...) and
    torch.distributed's calls (group=...). Every live rank calls it; the old group stays broken.
    `group`: an arcoll group (default: the default group)."""
    from torch.distributed import distributed_c10d as c10d
    return _group_of(*_backend_of(group)._shrink(c10d.get_rank()))


def grow(store, wait_for=1, group=None, key="arcoll/grow"):
    """The members' side of adding ranks: rank 0 tells newcomers at `key` of `store` (a store
    they reach too) where to join; every member waits, up to the timeout, for `wait_for` of
    them, and gets a group of the members followed by every newcomer waiting, in the order they
    came. Every member calls it."""
    from torch.distributed import distributed_c10d as c10d
    return _group_of(*_backend_of(group)._grow(store, key, wait_for, c10d.get_rank()))


def join(store, key="arcoll/grow", timeout=None):
    """A newcomer's side: once the members' grow() has said at `key` of `store` where to join,
    joins them; returns the group (this process has no default group: use group.rank(),
    group.size() and torch.distributed's calls with group=...)."""
    import datetime
    timeout = timeout if timeout is not None else datetime.timedelta(minutes=5)
    return _group_of(*ProcessGroupArcoll._join(store, key, timeout))
)",
           m.attr("__dict__"));

  // Which build of arcoll this module holds (it links its own copy): benchmarks that set it
  // beside arbench check that both come from the same tree.
  m.attr("__version__") = std::string(arcoll::version());
  m.attr("git_commit") = std::string(arcoll::git_commit());

  // Whether CUDA tensors are taken (this arcoll was built with the CUDA toolkit).
  m.attr("takes_cuda") = arcoll::torch_backend::takes_cuda_tensors();

  m.def("transports", &arcoll::Communicator::transports,
        "The transports of this build (ARCOLL_TRANSPORT's choices besides \"auto\").");

  m.def("_create", &arcoll::torch_backend::create, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
  py::object backend = py::module_::import("torch.distributed").attr("Backend");
  py::object parameters = py::module_::import("inspect")
                              .attr("signature")(backend.attr("register_backend"))
                              .attr("parameters");
  if (parameters.contains("devices")) {
    // torch 2.x: a backend for CPU tensors (unsaid, torch warns at every init and assumes CUDA
    // too), made from the extended options (the group's name and global ranks come with them).
    m.def(
        "_create_extended",
        [](py::object options, py::object /*backend_options*/) {
          auto store = options.attr("store").cast<c10::intrusive_ptr<c10d::Store>>();
          const int rank = options.attr("group_rank").cast<int>();
          const int size = options.attr("group_size").cast<int>();
          const auto timeout = options.attr("timeout").cast<std::chrono::milliseconds>();
          py::gil_scoped_release released;
          return arcoll::torch_backend::create(store, rank, size, timeout);
        },
        py::arg("options"), py::arg("backend_options"));
    backend.attr("register_backend")("arcoll", m.attr("_create_extended"),
                                     py::arg("extended_api") = true,
                                     py::arg("devices") = std::vector<std::string>{"cpu"});
  } else {
    backend.attr("register_backend")("arcoll", m.attr("_create"));
  }
}
