#include "frameworks/torch/process_group.hpp"

#include <unistd.h>

#include <ATen/Functions.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "arcoll/error.hpp"
#include "arcoll/launch.hpp"
#include "arcoll/options.hpp"
#include "arcoll/tuning.hpp"
#include "frameworks/torch/tensors.hpp"
#include "src/base/log.hpp"
#include "src/base/socket.hpp"

namespace arcoll::torch_backend {
namespace {

using Clock = std::chrono::steady_clock;

// The store key under which rank 0 says where arcoll's rendezvous listens, and the job token.
constexpr const char* kRendezvousKey = "arcoll/rendezvous";

std::string random_token() {
  std::random_device device;
  std::ostringstream text;
  for (int i = 0; i < 4; ++i) text << std::hex << device();
  return text.str();
}

// The host of torch's TCPStore under the prefixes torch puts around it; empty for other stores.
std::string tcp_store_host(c10::intrusive_ptr<c10d::Store> store) {
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(store.get()))
    store = prefixed->getUnderlyingStore();
  auto* tcp = dynamic_cast<c10d::TCPStore*>(store.get());
  return tcp != nullptr ? tcp->getHost() : std::string();
}

// Where the others reach rank 0: the address of this host's interface that reaches the master
// (ARCOLL_MASTER_ADDR, the host of torch's TCPStore, or MASTER_ADDR, which the others reach
// too), else of its first interface that is up. Never this host's own name: containers often
// cannot resolve it.
std::string rank0_address(const c10::intrusive_ptr<c10d::Store>& store) {
  std::vector<std::pair<std::string, std::string>> masters;  // (what names it, host)
  if (const char* value = std::getenv("ARCOLL_MASTER_ADDR"); value != nullptr && *value != '\0')
    masters.emplace_back("ARCOLL_MASTER_ADDR", value);
  if (std::string host = tcp_store_host(store); !host.empty())
    masters.emplace_back("torch's TCPStore", host);
  if (const char* value = std::getenv("MASTER_ADDR"); value != nullptr && *value != '\0')
    masters.emplace_back("MASTER_ADDR", value);
  for (const auto& [source, host] : masters) {
    try {
      std::string address = net::address_reaching(host);
      log::debug("torch backend: rendezvous at " + address + ", the interface reaching " + host +
                 " (" + source + ")");
      return address;
    } catch (const std::exception& e) {
      log::debug("torch backend: " + source + " '" + host + "' unusable: " + e.what());
    }
  }
  std::string address = net::first_external_address();
  log::debug("torch backend: rendezvous at " + address + ", this host's first interface (no master address)");
  return address;
}

Options options_for(std::chrono::milliseconds timeout) {
  Options options = Options::from_env();
  const BackendSettings& s = settings();
  if (s.algorithm) options.algorithm = *s.algorithm;
  if (s.wire) {
    const auto wire = parse_data_type(*s.wire);
    TORCH_CHECK(wire, "arcoll: wire '", *s.wire, "' is not f32, f16 or bf16");
    options.wire = *wire;
  }
  if (s.error_feedback) options.wire_error_feedback = *s.error_feedback;
  if (s.checksum) options.checksum = *s.checksum;
  // Every wait of a call honours the group's timeout (init_process_group's timeout=).
  options.timeout = timeout;
  return options;
}

}  // namespace

BackendSettings& settings() {
  static BackendSettings s;
  return s;
}

// Issue and completion of every call, written as a Chrome trace (chrome://tracing, Perfetto)
// when the group goes.
class Timeline {
 public:
  explicit Timeline(std::string path) : path_(std::move(path)), origin_(Clock::now()) {}
  ~Timeline() { write(); }
  void record(const std::string& name, std::size_t bytes, Clock::time_point issued) {
    std::lock_guard lock(mutex_);
    events_.push_back({name, bytes, issued, Clock::now()});
  }

 private:
  struct Event {
    std::string name;
    std::size_t bytes;
    Clock::time_point issued, completed;
  };
  void write() {
    std::ofstream out(path_);
    out << "[";
    const char* separator = "";
    for (const Event& e : events_) {
      auto us = [&](Clock::time_point t) {
        return std::chrono::duration<double, std::micro>(t - origin_).count();
      };
      out << separator << "\n{\"name\": \"" << e.name << "\", \"ph\": \"X\", \"pid\": 0, \"tid\": 0"
          << ", \"ts\": " << us(e.issued) << ", \"dur\": " << us(e.completed) - us(e.issued)
          << ", \"args\": {\"bytes\": " << e.bytes << "}}";
      separator = ",";
    }
    out << "\n]\n";
  }

  std::string path_;
  Clock::time_point origin_;
  std::mutex mutex_;
  std::vector<Event> events_;
};

namespace {

// The c10d Work of an arcoll call: completed (and its future, with the output tensors) on the
// progress thread once the call has.
class ArcollWork final : public c10d::Work {
 public:
  ArcollWork(c10d::OpType type, int rank, WorkPtr work, std::vector<at::Tensor> outputs,
             std::chrono::milliseconds timeout, std::function<void(const std::string&)> abort)
      : Work(rank, type),
        work_(std::move(work)),
        outputs_(std::move(outputs)),
        timeout_(timeout),
        abort_(std::move(abort)) {}

  // Blocks until the call completes, at most the group's timeout (or `timeout`); past it the
  // group is aborted, so that every rank's calls fail promptly instead of waiting on.
  // (Completion is this Work's own, set after the future: one wake-up, not one for the call
  // and another for the future.)
  bool wait(std::chrono::milliseconds timeout) override {
    const auto limit = timeout == kNoTimeout ? timeout_ : timeout;
    // The call may run on this thread (a queued call next in line: no hand-off to the progress
    // thread and back) or complete as this thread moves its messages (a send or receive, MPI's
    // progress rule): its callback then completes this Work here, with its error. A call
    // waited for with a timeout of its own goes to the progress thread at once, so that the
    // timeout holds.
    try {
      if (timeout == kNoTimeout)
        work_->wait();
      else
        (void)work_->wait_for(limit);
    } catch (...) {
    }
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, limit, [&] { return completed_; })) {
      lock.unlock();
      const std::string why = work_->description() + " did not complete within " +
                              std::to_string(limit.count()) + " ms";
      abort_(why);
      TORCH_CHECK(false, "arcoll: ", why, "; the process group is aborted");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  // Made when first asked for (DDP's reducer asks, a blocking call does not: without it, a
  // 1 KiB all-reduce through torch took 3.2 us instead of 3.5), completed by whichever of the
  // two comes second.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    bool ended;
    std::exception_ptr error;
    {
      std::lock_guard lock(future_mutex_);
      if (future_) return future_;
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()));
      future = future_;
      ended = ended_;
      error = error_;
    }
    if (ended)
      settle(*future, error);
    else
      (void)work_->test();  // waited for through the future, never by wait(): starts it now
    return future;
  }

  void complete(std::exception_ptr error) {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard lock(future_mutex_);
      ended_ = true;
      error_ = error;
      future = future_;
    }
    if (future) settle(*future, error);
    finish(error);
  }
  const arcoll::Work& call() const { return *work_; }

 private:
  WorkPtr work_;
  std::vector<at::Tensor> outputs_;
  std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> abort_;
  void settle(c10::ivalue::Future& future, const std::exception_ptr& error) {
    if (error)
      future.setError(error);
    else
      future.markCompleted(c10::IValue(outputs_));
  }

  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // null until asked for
  bool ended_ = false;
  std::exception_ptr error_;
};

}  // namespace

ProcessGroupArcoll::ProcessGroupArcoll(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : TorchBackend(rank, size), timeout_(timeout) {
  const arcoll::Options options = options_for(timeout);
  LaunchInfo launch;
  launch.rank = rank;
  launch.world_size = size;
  launch.source = "torch";
  if (size > 1) {
    if (rank == 0) {
      // arcoll's rendezvous store listens on every interface, on a port the kernel picks; the
      // others learn it, and the job token, from torch's store.
      net::Fd listener = net::listen_on("0.0.0.0", 0);
      const int port = net::local_endpoint(listener.get()).port;
      const std::string value = rank0_address(store) + " " + std::to_string(port) + " " + random_token();
      store->set(kRendezvousKey, std::vector<uint8_t>(value.begin(), value.end()));
      launch.store_listen_fd = listener.release();
    }
    store->wait({kRendezvousKey}, timeout);
    const std::vector<uint8_t> bytes = store->get(kRendezvousKey);
    std::istringstream value(std::string(bytes.begin(), bytes.end()));
    value >> launch.master_addr >> launch.master_port >> launch.job_token;
    TORCH_CHECK(value && launch.master_port > 0, "arcoll: malformed rendezvous entry in torch's store");
  }
  comm_ = std::make_unique<Communicator>(launch, options);
  log::debug("arcoll_torch rank " + std::to_string(rank) + ": " +
             use_calibrated_link_costs(*comm_, calibration_from_env()));
  start_timeline();
}

ProcessGroupArcoll::ProcessGroupArcoll(std::unique_ptr<Communicator> comm,
                                       std::chrono::milliseconds timeout)
    : TorchBackend(comm->rank(), comm->size()), comm_(std::move(comm)), timeout_(timeout) {
  start_timeline();
}

void ProcessGroupArcoll::start_timeline() {
  if (auto path = settings().timeline; path || std::getenv("ARCOLL_TIMELINE")) {
    std::string file = path ? *path : std::getenv("ARCOLL_TIMELINE");
    if (auto at = file.find("{rank}"); at != std::string::npos)
      file.replace(at, 6, std::to_string(comm_->rank()));
    else if (comm_->size() > 1)
      file += "." + std::to_string(comm_->rank());
    timeline_ = std::make_shared<Timeline>(file);
  }
}

c10::intrusive_ptr<ProcessGroupArcoll> ProcessGroupArcoll::shrink() {
  return c10::make_intrusive<ProcessGroupArcoll>(comm_->shrink(), timeout_);
}

c10::intrusive_ptr<ProcessGroupArcoll> ProcessGroupArcoll::grow(
    const c10::intrusive_ptr<c10d::Store>& store, const std::string& key, int wait_for) {
  if (comm_->rank() == 0) {
    const std::string value = comm_->rendezvous_address() + " " + comm_->job_token();
    store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }
  return c10::make_intrusive<ProcessGroupArcoll>(comm_->grow(wait_for), timeout_);
}

c10::intrusive_ptr<ProcessGroupArcoll> ProcessGroupArcoll::join(
    const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
    std::chrono::milliseconds timeout) {
  store->wait({key}, timeout);
  const std::vector<uint8_t> bytes = store->get(key);
  std::istringstream value(std::string(bytes.begin(), bytes.end()));
  std::string address, token;
  value >> address >> token;
  TORCH_CHECK(!address.empty(), "arcoll: malformed group address in torch's store");
  return c10::make_intrusive<ProcessGroupArcoll>(
      Communicator::join(address, token, options_for(timeout)), timeout);
}

ProcessGroupArcoll::~ProcessGroupArcoll() {
  // Destroying the communicator waits for its progress thread, whose completion callbacks may
  // need the GIL (a Python callback on a future): never hold it meanwhile.
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release released;
    comm_.reset();
  } else {
    comm_.reset();
  }
}

void ProcessGroupArcoll::abort(const std::string& reason) {
  comm_->abort(reason);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::wrap(c10d::OpType type, WorkPtr work,
                                                        std::vector<at::Tensor> outputs,
                                                        std::function<void()> finish,
                                                        std::shared_ptr<void> keep) {
  std::size_t bytes = 0;
  for (const at::Tensor& t : outputs) bytes += t.nbytes();
  auto w = c10::make_intrusive<ArcollWork>(
      type, getRank(), work, std::move(outputs), timeout_,
      [this](const std::string& why) { abort(why); });
  const auto issued = Clock::now();
  // The callback holds the Work until the call completes: a caller may drop it at once.
  work->on_completion([w, finish = std::move(finish), keep = std::move(keep),
                       timeline = timeline_, issued, bytes](const arcoll::Work& done) {
    std::exception_ptr error = done.exception();
    if (!error && finish) {
      try {
        finish();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (timeline) timeline->record(done.description(), bytes, issued);
    w->complete(error);
  });
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = one_tensor(tensors, "broadcast");
  return wrap(c10d::OpType::BROADCAST,
              comm_->ibroadcast(t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                data_type(t, "broadcast"), static_cast<int>(opts.rootRank)),
              tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = one_tensor(tensors, "allreduce");
  return wrap(c10d::OpType::ALLREDUCE,
              comm_->iallreduce(t.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.numel()),
                                data_type(t, "allreduce"), reduce_op(opts.reduceOp, "allreduce")),
              tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "arcoll: allreduce_coalesced of no tensors");
  const DataType type = data_type(tensors.front(), "allreduce_coalesced");
  std::vector<Buffer> buffers;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(data_type(t, "allreduce_coalesced") == type,
                "arcoll: allreduce_coalesced takes tensors of one dtype");
    buffers.push_back({t.data_ptr(), static_cast<std::size_t>(t.numel())});
  }
  return wrap(c10d::OpType::ALLREDUCE_COALESCED,
              comm_->iallreduce_coalesced(buffers, type,
                                          reduce_op(opts.reduceOp, "allreduce_coalesced")),
              tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const at::Tensor& t = one_tensor(tensors, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return wrap(c10d::OpType::REDUCE,
              comm_->ireduce(t.data_ptr(), getRank() == root ? t.data_ptr() : nullptr,
                             static_cast<std::size_t>(t.numel()), data_type(t, "reduce"),
                             reduce_op(opts.reduceOp, "reduce"), root),
              tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions&) {
  const at::Tensor& in = one_tensor(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "arcoll: allgather takes one output list per process");
  std::vector<at::Tensor>& blocks = outputs.front();
  check_blocks(blocks, in, getSize(), "allgather");
  // Into one buffer, then copied out to the caller's tensors.
  at::Tensor flat = flat_like(in, getSize());
  WorkPtr work = comm_->iallgather(in.data_ptr(), flat.data_ptr(),
                                   static_cast<std::size_t>(in.numel()), data_type(in, "allgather"));
  return wrap(c10d::OpType::ALLGATHER, work, blocks, [flat, blocks]() mutable {
    for (std::size_t r = 0; r < blocks.size(); ++r)
      blocks[r].view(-1).copy_(flat.narrow(0, static_cast<int64_t>(r) * blocks[r].numel(),
                                           blocks[r].numel()));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::_allgather_base(at::Tensor& output,
                                                                   at::Tensor& input,
                                                                   const c10d::AllgatherOptions&) {
  const DataType type = data_type(input, "_allgather_base");
  data_type(output, "_allgather_base");
  TORCH_CHECK(output.numel() == input.numel() * getSize() &&
                  output.scalar_type() == input.scalar_type(),
              "arcoll: _allgather_base: the output holds ", getSize(), " times the input");
  return wrap(c10d::OpType::_ALLGATHER_BASE,
              comm_->iallgather(input.data_ptr(), output.data_ptr(),
                                static_cast<std::size_t>(input.numel()), type),
              {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = one_tensor(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const bool is_root = getRank() == root;
  std::vector<at::Tensor> blocks;
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1, "arcoll: gather takes one output list on the root");
    blocks = outputs.front();
    check_blocks(blocks, in, getSize(), "gather");
  } else {
    TORCH_CHECK(outputs.empty(), "arcoll: gather takes no output list on ranks but the root");
  }
  at::Tensor flat = is_root ? flat_like(in, getSize()) : at::Tensor();
  WorkPtr work = comm_->igather(in.data_ptr(), is_root ? flat.data_ptr() : nullptr,
                                static_cast<std::size_t>(in.numel()), data_type(in, "gather"), root);
  return wrap(c10d::OpType::GATHER, work, blocks, [flat, blocks]() mutable {
    for (std::size_t r = 0; r < blocks.size(); ++r)
      blocks[r].view(-1).copy_(flat.narrow(0, static_cast<int64_t>(r) * blocks[r].numel(),
                                           blocks[r].numel()));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = one_tensor(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor flat;
  if (getRank() == root) {
    TORCH_CHECK(inputs.size() == 1, "arcoll: scatter takes one input list on the root");
    check_blocks(inputs.front(), out, getSize(), "scatter");
    flat = at::cat(inputs.front()).view(-1);  // one buffer, taken now: the caller may go on
  } else {
    TORCH_CHECK(inputs.empty(), "arcoll: scatter takes no input list on ranks but the root");
  }
  return wrap(c10d::OpType::SCATTER,
              comm_->iscatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(),
                              static_cast<std::size_t>(out.numel()), data_type(out, "scatter"),
                              root),
              outputs, {}, std::make_shared<at::Tensor>(flat));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = one_tensor(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "arcoll: reduce_scatter takes one input list per process");
  check_blocks(inputs.front(), out, getSize(), "reduce_scatter");
  at::Tensor flat = at::cat(inputs.front()).view(-1);
  return wrap(c10d::OpType::REDUCE_SCATTER,
              comm_->ireduce_scatter(flat.data_ptr(), out.data_ptr(),
                                     static_cast<std::size_t>(out.numel()),
                                     data_type(out, "reduce_scatter"),
                                     reduce_op(opts.reduceOp, "reduce_scatter")),
              outputs, {}, std::make_shared<at::Tensor>(flat));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const DataType type = data_type(output, "_reduce_scatter_base");
  data_type(input, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == output.numel() * getSize() &&
                  output.scalar_type() == input.scalar_type(),
              "arcoll: _reduce_scatter_base: the input holds ", getSize(), " times the output");
  return wrap(c10d::OpType::_REDUCE_SCATTER_BASE,
              comm_->ireduce_scatter(input.data_ptr(), output.data_ptr(),
                                     static_cast<std::size_t>(output.numel()), type,
                                     reduce_op(opts.reduceOp, "_reduce_scatter_base")),
              {output});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions&) {
  const DataType type = data_type(input, "alltoall_base");
  data_type(output, "alltoall_base");
  TORCH_CHECK(input.scalar_type() == output.scalar_type(),
              "arcoll: alltoall_base: input and output of one dtype");
  const auto p = static_cast<std::size_t>(getSize());
  if (output_split_sizes.empty() && input_split_sizes.empty()) {
    TORCH_CHECK(input.numel() % getSize() == 0 && input.numel() == output.numel(),
                "arcoll: alltoall_base: input and output of equal size, a multiple of ", getSize());
    return wrap(c10d::OpType::ALLTOALL_BASE,
                comm_->ialltoall(input.data_ptr(), output.data_ptr(),
                                 static_cast<std::size_t>(input.numel()) / p, type),
                {output});
  }
  // Unequal splits along the first dimension: counts and offsets in elements, kept with the
  // call.
  struct Splits {
    std::vector<std::size_t> send_counts, send_offsets, recv_counts, recv_offsets;
  };
  auto splits = std::make_shared<Splits>();
  auto fill = [&](const at::Tensor& t, const std::vector<int64_t>& sizes,
                  std::vector<std::size_t>& counts, std::vector<std::size_t>& offsets) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t row = rows == 0 ? 0 : t.numel() / rows;
    std::vector<int64_t> per_rank = sizes;
    if (per_rank.empty()) {
      TORCH_CHECK(rows % getSize() == 0, "arcoll: alltoall_base: ", rows,
                  " rows do not split evenly over ", getSize(), " ranks");
      per_rank.assign(p, rows / getSize());
    }
    TORCH_CHECK(per_rank.size() == p, "arcoll: alltoall_base: ", per_rank.size(),
                " split sizes for ", getSize(), " ranks");
    TORCH_CHECK(std::accumulate(per_rank.begin(), per_rank.end(), int64_t{0}) == rows,
                "arcoll: alltoall_base: the split sizes do not add up to the ", rows, " rows");
    std::size_t at = 0;
    for (int64_t rows_of_rank : per_rank) {
      counts.push_back(static_cast<std::size_t>(rows_of_rank * row));
      offsets.push_back(at);
      at += counts.back();
    }
  };
  fill(input, input_split_sizes, splits->send_counts, splits->send_offsets);
  fill(output, output_split_sizes, splits->recv_counts, splits->recv_offsets);
  return wrap(c10d::OpType::ALLTOALL_BASE,
              comm_->ialltoallv(input.data_ptr(), splits->send_counts, splits->send_offsets,
                                output.data_ptr(), splits->recv_counts, splits->recv_offsets,
                                type),
              {output}, {}, splits);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions&) {
  const auto p = static_cast<std::size_t>(getSize());
  TORCH_CHECK(inputs.size() == p && outputs.size() == p, "arcoll: alltoall takes ", getSize(),
              " input and output tensors (one per rank)");
  const DataType type = data_type(inputs.front(), "alltoall");
  struct Staged {
    at::Tensor send, recv;
    std::vector<std::size_t> send_counts, send_offsets, recv_counts, recv_offsets;
  };
  auto staged = std::make_shared<Staged>();
  std::size_t sent = 0, received = 0;
  for (std::size_t r = 0; r < p; ++r) {
    TORCH_CHECK(data_type(inputs[r], "alltoall") == type && data_type(outputs[r], "alltoall") == type,
                "arcoll: alltoall takes tensors of one dtype");
    staged->send_counts.push_back(static_cast<std::size_t>(inputs[r].numel()));
    staged->send_offsets.push_back(sent);
    sent += staged->send_counts.back();
    staged->recv_counts.push_back(static_cast<std::size_t>(outputs[r].numel()));
    staged->recv_offsets.push_back(received);
    received += staged->recv_counts.back();
  }
  std::vector<at::Tensor> flat_inputs;
  for (const at::Tensor& t : inputs) flat_inputs.push_back(t.view(-1));
  staged->send = at::cat(flat_inputs);
  staged->recv = at::empty({static_cast<int64_t>(received)}, inputs.front().options());
  WorkPtr work = comm_->ialltoallv(staged->send.data_ptr(), staged->send_counts,
                                   staged->send_offsets, staged->recv.data_ptr(),
                                   staged->recv_counts, staged->recv_offsets, type);
  return wrap(c10d::OpType::ALLTOALL, work, outputs, [staged, outputs]() mutable {
    for (std::size_t r = 0; r < outputs.size(); ++r)
      outputs[r].view(-1).copy_(staged->recv.narrow(0, static_cast<int64_t>(staged->recv_offsets[r]),
                                                    outputs[r].numel()));
  }, staged);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::barrier(const c10d::BarrierOptions&) {
  return wrap(c10d::OpType::BARRIER, comm_->ibarrier(), {});
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::send(std::vector<at::Tensor>& tensors,
                                                        int dst_rank, int tag) {
  const at::Tensor& t = one_tensor(tensors, "send");
  data_type(t, "send");
  return wrap(c10d::OpType::SEND, comm_->isend(t.data_ptr(), t.nbytes(), dst_rank, tag), tensors);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupArcoll::recv(std::vector<at::Tensor>& tensors,
                                                        int src_rank, int tag) {
  const at::Tensor& t = one_tensor(tensors, "recv");
  data_type(t, "recv");
  return wrap(c10d::OpType::RECV, comm_->irecv(t.data_ptr(), t.nbytes(), src_rank, tag), tensors);
}

c10::intrusive_ptr<TorchBackend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                        int size, std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupArcoll>(store, rank, size, timeout);
}

}  // namespace arcoll::torch_backend
