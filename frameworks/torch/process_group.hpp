// arcoll as a torch.distributed backend: a c10d::ProcessGroup whose collectives are arcoll's
// non-blocking calls. Each returns a Work whose future completes with the call's output tensors
// (what DDP's communication hooks read), on arcoll's progress thread, while the caller (autograd,
// DDP's reducer) goes on. The ranks meet through the store torch hands the backend: rank 0
// publishes where arcoll's own rendezvous listens, and a token only this job knows.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"

namespace arcoll::torch_backend {

// What a user may set, in code (arcoll_torch.configure) or by environment (ARCOLL_ALGO,
// ARCOLL_WIRE, ARCOLL_WIRE_ERROR_FEEDBACK, ARCOLL_CHECKSUM, ARCOLL_TIMELINE): the first
// overrides the second.
struct BackendSettings {
  std::optional<std::string> algorithm;
  std::optional<std::string> wire;  // "f32", "f16", "bf16"
  std::optional<bool> error_feedback;
  std::optional<bool> checksum;
  // A Chrome trace of every call (issued, completed) written per rank when the group goes:
  // "{rank}" in the path becomes the rank.
  std::optional<std::string> timeline;
};
BackendSettings& settings();

class Timeline;

// torch 2.x holds a Backend per device in its ProcessGroup (arcoll's: "cpu"); torch 1.13 takes a
// ProcessGroup itself. The calls are the same.
#if TORCH_VERSION_MAJOR >= 2
using TorchBackend = c10d::Backend;
#else
using TorchBackend = c10d::ProcessGroup;
#endif

class ProcessGroupArcoll final : public TorchBackend {
 public:
  // Joins the group's ranks through `store` (collective; blocks until all have joined or
  // `timeout` passed).
  ProcessGroupArcoll(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  // A group on a communicator made already (the survivors' of shrink()).
  ProcessGroupArcoll(std::unique_ptr<Communicator> comm, std::chrono::milliseconds timeout);
  ~ProcessGroupArcoll() override;

  const std::string getBackendName() const override { return "arcoll"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;

  Communicator& communicator() { return *comm_; }
  // Gives up on the group: every rank's calls fail at once naming this rank and `reason`.
  void abort(const std::string& reason);
  // After a failure: a group of the live ranks (Communicator::shrink()); every one calls it.
  c10::intrusive_ptr<ProcessGroupArcoll> shrink();
  // The members' side of Communicator::grow(): rank 0 first tells newcomers, at `key` of
  // `store`, where to join and the token; then the group with them appended.
  c10::intrusive_ptr<ProcessGroupArcoll> grow(const c10::intrusive_ptr<c10d::Store>& store,
                                              const std::string& key, int wait_for);
  // A newcomer's side: waits for `key` in `store`, then joins the group it names.
  static c10::intrusive_ptr<ProcessGroupArcoll> join(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::string& key,
                                                     std::chrono::milliseconds timeout);

 private:
  // Wraps an arcoll call's Work: `outputs` are the future's value; `finish` (run on the
  // progress thread once the call succeeded) copies staged results into them. `keep` holds
  // what must outlive the call (staging tensors, count arrays).
  c10::intrusive_ptr<c10d::Work> wrap(c10d::OpType type, WorkPtr work,
                                      std::vector<at::Tensor> outputs,
                                      std::function<void()> finish = {},
                                      std::shared_ptr<void> keep = {});

  // ARCOLL_TIMELINE or arcoll_torch.configure(timeline=...): a trace of this rank's calls.
  void start_timeline();
  std::unique_ptr<Communicator> comm_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Timeline> timeline_;  // null unless asked for
};

// The creator torch.distributed calls for init_process_group("arcoll", ...).
c10::intrusive_ptr<TorchBackend> create(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size,
                                              std::chrono::milliseconds timeout);

}  // namespace arcoll::torch_backend
