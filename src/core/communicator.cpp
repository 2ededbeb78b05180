// The public API: each call's checks, at once on the caller's thread (a bad call throws
// InvalidArgument and sends nothing), then its arguments go to the Impl, which runs it now or
// queues it (calls.hpp).
#include "arcoll/communicator.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <vector>

#include "algorithms/cost_model.hpp"
#include "arcoll/error.hpp"
#include "src/base/env.hpp"
#include "src/base/log.hpp"
#include "src/core/calls.hpp"
#include "src/core/link_costs_source.hpp"

namespace arcoll {
namespace {

using Impl = Communicator::Impl;

CollectiveArgs allreduce_args(const Impl& impl, const void* send, void* recv, std::size_t count,
                              DataType type, ReduceOp op) {
  impl.check_buffer("allreduce", send, count, type);
  impl.check_buffer("allreduce", recv, count, type);
  impl.check_reduction("allreduce", type, op);
  impl.check_overlap("allreduce", send, count, recv, count, type, 0);
  return {send, recv, count, type, op, 0};
}

std::vector<Buffer> coalesced_args(const Impl& impl, std::span<const Buffer> buffers, DataType type,
                                   ReduceOp op) {
  const char* operation = "allreduce_coalesced";
  for (const Buffer& b : buffers) impl.check_buffer(operation, b.data, b.count, type);
  impl.check_reduction(operation, type, op);
  std::vector<Buffer> sorted(buffers.begin(), buffers.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const Buffer& a, const Buffer& b) { return a.data < b.data; });
  for (std::size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i - 1].count != 0 && sorted[i].count != 0 &&
        static_cast<const char*>(sorted[i - 1].data) + sorted[i - 1].count * size_of(type) >
            static_cast<const char*>(sorted[i].data))
      throw InvalidArgument(operation, "two of the buffers overlap", impl.rank_);
  return {buffers.begin(), buffers.end()};
}

CollectiveArgs reduce_scatter_args(const Impl& impl, const void* send, void* recv,
                                   std::size_t recv_count, DataType type, ReduceOp op) {
  const auto blocks = static_cast<std::size_t>(impl.rendezvous_.size);
  impl.check_buffer("reduce_scatter", send, recv_count, type, blocks);
  impl.check_buffer("reduce_scatter", recv, recv_count, type);
  impl.check_reduction("reduce_scatter", type, op);
  impl.check_overlap("reduce_scatter", send, recv_count * blocks, recv, recv_count, type,
                     -static_cast<std::ptrdiff_t>(recv_count) * impl.rank_);
  return {send, recv, recv_count, type, op, 0};
}

CollectiveArgs allgather_args(const Impl& impl, const void* send, void* recv,
                              std::size_t send_count, DataType type) {
  const auto blocks = static_cast<std::size_t>(impl.rendezvous_.size);
  impl.check_buffer("allgather", send, send_count, type);
  impl.check_buffer("allgather", recv, send_count, type, blocks);
  impl.check_overlap("allgather", send, send_count, recv, send_count * blocks, type,
                     static_cast<std::ptrdiff_t>(send_count) * impl.rank_);
  return {send, recv, send_count, type, ReduceOp::sum, 0};
}

CollectiveArgs broadcast_args(const Impl& impl, void* buffer, std::size_t count, DataType type,
                              int root) {
  impl.check_buffer("broadcast", buffer, count, type);
  impl.check_root("broadcast", root);
  return {buffer, buffer, count, type, ReduceOp::sum, root};
}

CollectiveArgs reduce_args(const Impl& impl, const void* send, void* recv, std::size_t count,
                           DataType type, ReduceOp op, int root) {
  impl.check_root("reduce", root);
  impl.check_buffer("reduce", send, count, type);
  impl.check_reduction("reduce", type, op);
  if (impl.rank_ == root) {
    impl.check_buffer("reduce", recv, count, type);
    impl.check_overlap("reduce", send, count, recv, count, type, 0);
  }
  return {send, recv, count, type, op, root};
}

CollectiveArgs gather_args(const Impl& impl, const void* send, void* recv, std::size_t send_count,
                           DataType type, int root) {
  const auto blocks = static_cast<std::size_t>(impl.rendezvous_.size);
  impl.check_root("gather", root);
  impl.check_buffer("gather", send, send_count, type);
  if (impl.rank_ == root) {
    impl.check_buffer("gather", recv, send_count, type, blocks);
    impl.check_overlap("gather", send, send_count, recv, send_count * blocks, type,
                       static_cast<std::ptrdiff_t>(send_count) * root);
  }
  return {send, recv, send_count, type, ReduceOp::sum, root};
}

CollectiveArgs scatter_args(const Impl& impl, const void* send, void* recv, std::size_t recv_count,
                            DataType type, int root) {
  const auto blocks = static_cast<std::size_t>(impl.rendezvous_.size);
  impl.check_root("scatter", root);
  impl.check_buffer("scatter", recv, recv_count, type);
  if (impl.rank_ == root) {
    impl.check_buffer("scatter", send, recv_count, type, blocks);
    impl.check_overlap("scatter", send, recv_count * blocks, recv, recv_count, type,
                       -static_cast<std::ptrdiff_t>(recv_count) * root);
  }
  return {send, recv, recv_count, type, ReduceOp::sum, root};
}

CollectiveArgs alltoall_args(const Impl& impl, const void* send, void* recv, std::size_t count,
                             DataType type) {
  const auto blocks = static_cast<std::size_t>(impl.rendezvous_.size);
  impl.check_buffer("alltoall", send, count, type, blocks);
  impl.check_buffer("alltoall", recv, count, type, blocks);
  impl.check_overlap("alltoall", send, count * blocks, recv, count * blocks, type, 0);
  return {send, recv, count, type, ReduceOp::sum, 0};
}

// The elements a call's blocks span: the end of the last one.
std::size_t extent(const Impl& impl, std::span<const std::size_t> counts,
                   std::span<const std::size_t> offsets) {
  std::size_t end = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (offsets[r] > std::numeric_limits<std::size_t>::max() / 2 - counts[r])
      throw InvalidArgument("alltoallv", "block " + std::to_string(r) + " overflows", impl.rank_);
    if (counts[r] != 0) end = std::max(end, offsets[r] + counts[r]);
  }
  return end;
}

CollectiveArgs alltoallv_args(const Impl& impl, const void* send,
                              std::span<const std::size_t> send_counts,
                              std::span<const std::size_t> send_offsets, void* recv,
                              std::span<const std::size_t> recv_counts,
                              std::span<const std::size_t> recv_offsets, DataType type) {
  const char* operation = "alltoallv";
  const auto p = static_cast<std::size_t>(impl.rendezvous_.size);
  for (auto [name, span] : {std::pair{"send_counts", send_counts},
                            {"send_offsets", send_offsets},
                            {"recv_counts", recv_counts},
                            {"recv_offsets", recv_offsets}})
    if (span.size() != p)
      throw InvalidArgument(operation,
                            std::string(name) + " holds " + std::to_string(span.size()) +
                                " entries where this " + std::to_string(p) +
                                "-rank communicator needs one per rank",
                            impl.rank_);
  const auto self = static_cast<std::size_t>(impl.rank_);
  if (send_counts[self] != recv_counts[self])
    throw InvalidArgument(operation,
                          "this rank sends itself " + std::to_string(send_counts[self]) +
                              " elements but expects " + std::to_string(recv_counts[self]),
                          impl.rank_);
  const std::size_t send_extent = extent(impl, send_counts, send_offsets);
  const std::size_t recv_extent = extent(impl, recv_counts, recv_offsets);
  impl.check_buffer(operation, send, send_extent, type);
  impl.check_buffer(operation, recv, recv_extent, type);
  impl.check_overlap(operation, send, send_extent, recv, recv_extent, type, std::nullopt);
  CollectiveArgs args{send, recv, 0, type, ReduceOp::sum, 0};
  args.send_counts = send_counts.data();
  args.send_offsets = send_offsets.data();
  args.recv_counts = recv_counts.data();
  args.recv_offsets = recv_offsets.data();
  return args;
}

Impl::Transfer transfer(const Impl& impl, const char* operation, Request::Kind kind,
                        const void* buffer, std::size_t bytes, int peer, int tag) {
  const Impl::Transfer t{kind, const_cast<void*>(buffer), bytes, peer};
  impl.check_transfer(operation, t, tag);
  return t;
}

}  // namespace

Communicator::Communicator(const LaunchInfo& launch, const Options& options)
    : impl_(std::make_unique<Impl>(launch, options)) {}

std::unique_ptr<Communicator> Communicator::from_env() {
  auto comm = std::make_unique<Communicator>(detect_launch(), Options::from_env());
  apply_link_costs_sources(*comm);
  return comm;
}

void apply_link_costs_sources(Communicator& comm) {
  for (const LinkCostsSource* source : Registry<LinkCostsSource>::instance().all())
    log::debug("rank " + std::to_string(comm.rank()) + ": " + source->apply(comm));
}

Communicator::~Communicator() = default;

int Communicator::rank() const {
  return impl_->rank_;
}
int Communicator::size() const {
  return impl_->rendezvous_.size;
}
int Communicator::local_rank() const {
  return impl_->rendezvous_.local_rank;
}
int Communicator::local_size() const {
  return impl_->rendezvous_.local_size;
}
int Communicator::node_id() const {
  return impl_->rendezvous_.host_id;
}
int Communicator::node_count() const {
  return impl_->rendezvous_.host_count;
}
const std::string& Communicator::node_name() const {
  return impl_->rendezvous_.hosts[static_cast<std::size_t>(impl_->rank_)];
}
const Options& Communicator::options() const {
  return impl_->options_;
}
std::string Communicator::transport_name() const {
  return impl_->engine_->transport_name();
}
std::string Communicator::algorithm_name() const {
  if (find_collective(impl_->options_.algorithm, Collective::allreduce))
    return impl_->options_.algorithm;
  // "auto: recursive_doubling up to 16 KiB, halving_doubling up to 1 MiB, ring above"
  auto size_text = [](std::size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
           : bytes >= 1024     ? std::to_string(bytes >> 10) + " KiB"
                               : std::to_string(bytes) + " B";
  };
  std::string text;
  std::string current = impl_->predict(Collective::allreduce, "auto", 8).algorithm;
  for (std::size_t bytes = 16; bytes <= (std::size_t{1} << 30); bytes *= 2) {
    std::string next = impl_->predict(Collective::allreduce, "auto", bytes).algorithm;
    if (next == current) continue;
    text += current + " up to " + size_text(bytes / 2) + ", ";
    current = next;
  }
  return "auto: " + text + current + (text.empty() ? "" : " above");
}

std::string Communicator::transport_to(int peer) const {
  if (peer < 0 || peer >= size())
    throw InvalidArgument("transport_to",
                          "peer " + std::to_string(peer) + " is not a rank of this " +
                              std::to_string(size()) + "-rank communicator",
                          rank());
  return impl_->engine_->transport_to(peer);
}

std::vector<std::string> Communicator::allreduce_algorithms() {
  return algorithms("allreduce");
}

std::vector<std::string> Communicator::transports() {
  return TransportRegistry::instance().names();
}

std::string Communicator::transport_choice_problem(const std::string& choice) {
  return arcoll::transport_choice_problem(choice);
}

std::string Communicator::transport_environment(const std::string& transport) {
  const TransportInfo* info = TransportRegistry::instance().find(transport);
  return info == nullptr ? "" : env::with_prefixes(info->steering_variables);
}

void Communicator::set_algorithm(const std::string& name) {
  impl_->set_algorithm(name);
}

Prediction Communicator::predict_allreduce(std::size_t bytes, const std::string& algorithm) const {
  return predict("allreduce", bytes, algorithm);
}

std::vector<std::string> Communicator::algorithms(const std::string& collective) {
  const std::optional<Collective> known = parse_collective(collective);
  if (!known || *known == Collective::barrier || *known == Collective::alltoallv)
    throw InvalidArgument("algorithms", "unknown collective '" + collective + "'");
  return algorithm_names(*known, /*with_cost=*/true);
}

Prediction Communicator::predict(const std::string& collective, std::size_t bytes,
                                 const std::string& algorithm) const {
  const std::vector<std::string> known = algorithms(collective);
  if (algorithm != "auto" && std::find(known.begin(), known.end(), algorithm) == known.end()) {
    std::string names = "auto";
    for (const std::string& name : known) names += ", " + name;
    throw InvalidArgument("predict",
                          "no " + collective + " algorithm '" + algorithm + "' with a cost formula"
                              " (known: " + names + ")",
                          rank());
  }
  const Plan plan = impl_->predict(*parse_collective(collective), algorithm, bytes);
  return {plan.algorithm, plan.chunk_bytes, plan.seconds};
}

Prediction Communicator::predict_parameter_server(std::size_t bytes, int dedicated_servers,
                                                           std::size_t piece_bytes) const {
  if (dedicated_servers < 0 || piece_bytes == 0)
    throw InvalidArgument("predict_parameter_server",
                          "servers must be 0 or more and pieces larger than 0 bytes", rank());
  const double seconds =
      cost::parameter_server_seconds(impl_->engine_->layout(), static_cast<double>(bytes),
                                     dedicated_servers, static_cast<double>(piece_bytes));
  return {dedicated_servers > 0 ? "ps/" + std::to_string(dedicated_servers) : "ps", 0, seconds};
}

void Communicator::set_wire(DataType wire) {
  impl_->set_wire(wire);
}

void Communicator::set_wire(DataType wire, bool error_feedback) {
  impl_->set_wire(wire, error_feedback);
}

void Communicator::set_tuning(const Tuning& tuning) {
  impl_->set_tuning(tuning);
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  impl_->set_timeout(timeout);
}

void Communicator::abort(const std::string& reason) {
  impl_->abort(reason);
}

// ---- collectives -------------------------------------------------------------------------

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op) {
  impl_->execute(Collective::allreduce, allreduce_args(*impl_, send, recv, count, type, op));
}

WorkPtr Communicator::iallreduce(const void* send, void* recv, std::size_t count, DataType type,
                                 ReduceOp op) {
  return impl_->submit(Collective::allreduce, allreduce_args(*impl_, send, recv, count, type, op));
}

void Communicator::allreduce_coalesced(std::span<const Buffer> buffers, DataType type,
                                       ReduceOp op) {
  impl_->execute_coalesced(coalesced_args(*impl_, buffers, type, op), type, op);
}

WorkPtr Communicator::iallreduce_coalesced(std::span<const Buffer> buffers, DataType type,
                                           ReduceOp op) {
  return impl_->submit_coalesced(coalesced_args(*impl_, buffers, type, op), type, op);
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DataType type, ReduceOp op) {
  impl_->execute(Collective::reduce_scatter,
                 reduce_scatter_args(*impl_, send, recv, recv_count, type, op));
}

WorkPtr Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                      DataType type, ReduceOp op) {
  return impl_->submit(Collective::reduce_scatter,
                       reduce_scatter_args(*impl_, send, recv, recv_count, type, op));
}

void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType type) {
  impl_->execute(Collective::allgather, allgather_args(*impl_, send, recv, send_count, type));
}

WorkPtr Communicator::iallgather(const void* send, void* recv, std::size_t send_count,
                                 DataType type) {
  return impl_->submit(Collective::allgather, allgather_args(*impl_, send, recv, send_count, type));
}

void Communicator::broadcast(void* buffer, std::size_t count, DataType type, int root) {
  impl_->execute(Collective::broadcast, broadcast_args(*impl_, buffer, count, type, root));
}

WorkPtr Communicator::ibroadcast(void* buffer, std::size_t count, DataType type, int root) {
  return impl_->submit(Collective::broadcast, broadcast_args(*impl_, buffer, count, type, root));
}

void Communicator::reduce(const void* send, void* recv, std::size_t count, DataType type,
                          ReduceOp op, int root) {
  impl_->execute(Collective::reduce, reduce_args(*impl_, send, recv, count, type, op, root));
}

WorkPtr Communicator::ireduce(const void* send, void* recv, std::size_t count, DataType type,
                              ReduceOp op, int root) {
  return impl_->submit(Collective::reduce, reduce_args(*impl_, send, recv, count, type, op, root));
}

void Communicator::gather(const void* send, void* recv, std::size_t send_count, DataType type,
                          int root) {
  impl_->execute(Collective::gather, gather_args(*impl_, send, recv, send_count, type, root));
}

WorkPtr Communicator::igather(const void* send, void* recv, std::size_t send_count, DataType type,
                              int root) {
  return impl_->submit(Collective::gather, gather_args(*impl_, send, recv, send_count, type, root));
}

void Communicator::scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                           int root) {
  impl_->execute(Collective::scatter, scatter_args(*impl_, send, recv, recv_count, type, root));
}

WorkPtr Communicator::iscatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                               int root) {
  return impl_->submit(Collective::scatter,
                       scatter_args(*impl_, send, recv, recv_count, type, root));
}

void Communicator::alltoall(const void* send, void* recv, std::size_t count, DataType type) {
  impl_->execute(Collective::alltoall, alltoall_args(*impl_, send, recv, count, type));
}

WorkPtr Communicator::ialltoall(const void* send, void* recv, std::size_t count, DataType type) {
  return impl_->submit(Collective::alltoall, alltoall_args(*impl_, send, recv, count, type));
}

void Communicator::alltoallv(const void* send, std::span<const std::size_t> send_counts,
                             std::span<const std::size_t> send_offsets, void* recv,
                             std::span<const std::size_t> recv_counts,
                             std::span<const std::size_t> recv_offsets, DataType type) {
  impl_->execute(Collective::alltoallv, alltoallv_args(*impl_, send, send_counts, send_offsets,
                                                       recv, recv_counts, recv_offsets, type));
}

WorkPtr Communicator::ialltoallv(const void* send, std::span<const std::size_t> send_counts,
                                 std::span<const std::size_t> send_offsets, void* recv,
                                 std::span<const std::size_t> recv_counts,
                                 std::span<const std::size_t> recv_offsets, DataType type) {
  return impl_->submit(Collective::alltoallv,
                       alltoallv_args(*impl_, send, send_counts, send_offsets, recv, recv_counts,
                                      recv_offsets, type));
}

void Communicator::barrier() {
  impl_->execute(Collective::barrier, {nullptr, nullptr, 0, DataType::u8, ReduceOp::sum, 0});
}

WorkPtr Communicator::ibarrier() {
  return impl_->submit(Collective::barrier, {nullptr, nullptr, 0, DataType::u8, ReduceOp::sum, 0});
}

// ---- point-to-point ----------------------------------------------------------------------

void Communicator::send(const void* buffer, std::size_t bytes, int peer, int tag) {
  const Impl::Transfer t = transfer(*impl_, "send", Request::Kind::send, buffer, bytes, peer, tag);
  impl_->execute_transfers("send", {&t, 1}, tag);
}

void Communicator::recv(void* buffer, std::size_t bytes, int peer, int tag) {
  const Impl::Transfer t = transfer(*impl_, "recv", Request::Kind::recv, buffer, bytes, peer, tag);
  impl_->execute_transfers("recv", {&t, 1}, tag);
}

WorkPtr Communicator::isend(const void* buffer, std::size_t bytes, int peer, int tag) {
  return impl_->post_transfer(
      "send", transfer(*impl_, "send", Request::Kind::send, buffer, bytes, peer, tag), tag);
}

WorkPtr Communicator::irecv(void* buffer, std::size_t bytes, int peer, int tag) {
  return impl_->post_transfer(
      "recv", transfer(*impl_, "recv", Request::Kind::recv, buffer, bytes, peer, tag), tag);
}

void Communicator::sendrecv(const void* send_buffer, std::size_t send_bytes, int destination,
                            void* recv_buffer, std::size_t recv_bytes, int source, int tag) {
  const std::array<Impl::Transfer, 2> transfers{
      transfer(*impl_, "sendrecv", Request::Kind::send, send_buffer, send_bytes, destination, tag),
      transfer(*impl_, "sendrecv", Request::Kind::recv, recv_buffer, recv_bytes, source, tag)};
  impl_->execute_transfers("sendrecv", transfers, tag);
}

}  // namespace arcoll
