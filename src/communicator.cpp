#include "arcoll/communicator.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "algorithms/algorithm.hpp"
#include "arcoll/error.hpp"
#include "src/env.hpp"
#include "src/log.hpp"
#include "src/reduce.hpp"
#include "src/store.hpp"
#include "transports/transport.hpp"

namespace arcoll {
namespace {

using net::Clock;

// Tags of collectives have the top bit set; user point-to-point tags must not.
constexpr std::uint32_t kCollectiveTagBit = 0x80000000u;

// All-reduces up to this size take recursive doubling under "auto": log2(p) rounds beat the
// ring's 2(p-1) below it (measured with arbench --algo on 2 and 4 ranks, shm).
constexpr std::size_t kSmallAllreduceBytes = 32 * 1024;
constexpr const char* kSmallAllreduceAlgorithm = "recursive_doubling";

// The algorithm each collective uses when Options::algorithm is "auto" or names an
// algorithm that does not implement that collective.
const std::map<Collective, std::string> kDefaultAlgorithm = {
    {Collective::allreduce, "ring"},        {Collective::reduce_scatter, "ring"},
    {Collective::allgather, "ring"},        {Collective::broadcast, "ring"},
    {Collective::barrier, "dissemination"},
};

std::string seconds_text(std::chrono::milliseconds timeout) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(timeout.count()) / 1000.0);
  return text;
}

// Emulated hosts are named "<machine>#<index>"; real host names never hold the separator.
constexpr char kEmulatedHostSeparator = '#';

// The machine behind a host name: emulated hosts of one machine share its cores.
std::string machine_of(const std::string& node) {
  return node.substr(0, node.find(kEmulatedHostSeparator));
}

// The host a rank runs on. ARCOLL_EMULATED_HOSTS=N splits the ranks of one machine into N
// pretend hosts of consecutive ranks, so that mixed shm+tcp runs on one machine.
std::string node_name_of(int rank, int size) {
  std::string name;
  if (auto id = env::get("ARCOLL_NODE_ID")) {
    name = *id;
  } else {
    char host[256] = {};
    name = ::gethostname(host, sizeof host - 1) == 0 ? host : "localhost";
  }
  if (auto hosts = env::get("ARCOLL_EMULATED_HOSTS")) {
    const int n = std::atoi(hosts->c_str());
    if (n < 1)
      throw InvalidArgument("communicator",
                            "ARCOLL_EMULATED_HOSTS='" + *hosts + "' is not a number of hosts >= 1",
                            rank);
    name += kEmulatedHostSeparator +
            std::to_string(static_cast<long long>(rank) * std::min(n, size) / size);
  }
  return name;
}

// While several transports serve a communicator, a wait sleeps on the one it waits for in
// slices this long, polling the others between slices.
constexpr auto kMixedWaitSlice = std::chrono::microseconds(200);

}  // namespace

class Communicator::Impl final : public PointToPoint {
 public:
  Impl(const LaunchInfo& launch, const Options& options);
  ~Impl() override = default;

  // PointToPoint, as algorithms see it during a collective.
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::size_t chunk_bytes() const override { return options_.chunk_bytes; }
  RequestPtr isend(int peer, const void* buffer, std::size_t bytes) override {
    return start(Request::Kind::send, peer, const_cast<void*>(buffer), bytes, tag_);
  }
  RequestPtr irecv(int peer, void* buffer, std::size_t bytes) override {
    return start(Request::Kind::recv, peer, buffer, bytes, tag_);
  }
  RequestPtr irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                          DataType type, ReduceOp op) override;
  void wait(const RequestPtr& request) override;
  void* scratch(std::size_t bytes, int slot) override;

  // Runs one collective with validation, deadline and error reporting.
  void run(Collective collective, const CollectiveArgs& args);
  void point_to_point(Request::Kind kind, void* buffer, std::size_t bytes, int peer, int tag);
  // `blocks` blocks of `count` elements each.
  void check_buffer(const char* operation, const void* buffer, std::size_t count, DataType type,
                    std::size_t blocks = 1);
  template <class Name>
  void check_usable(const Name& operation) const {
    if (!broken_.empty())
      throw PeerError(operation(),
                      "this communicator can no longer be used after an earlier failure (" +
                          broken_ + "); destroy it and create a new one",
                      rank_);
  }
  std::string algorithm_for(Collective collective, std::size_t bytes) const;

  Options options_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int node_id_ = 0;
  int node_count_ = 1;
  std::string node_name_;
  std::string transport_name_;

 private:
  RequestPtr start(Request::Kind kind, int peer, void* buffer, std::size_t bytes, std::uint32_t tag,
                   std::optional<Request::Reduction> reduction = {});
  void bootstrap(const LaunchInfo& launch, Clock::time_point deadline);
  std::vector<std::string> gather_node_names(Clock::time_point deadline);
  [[noreturn]] void fail(const Error& e, const std::string& operation);

  std::unique_ptr<StoreServer> store_server_;
  std::unique_ptr<StoreClient> store_;
  // Which transport reaches each rank; several when ranks share some hosts but not all.
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<Transport*> route_;
  std::exception_ptr transport_failure() const {
    for (const auto& t : transports_)
      if (auto f = t->failure()) return f;
    return nullptr;
  }
  std::vector<std::vector<char>> scratch_;
  // Reducing receives over transports that cannot reduce on receive: the message lands in
  // `staging`, reduced into `destination` when waited for.
  struct Staged {
    RequestPtr request;
    void* destination;
    Request::Reduction reduction;
    std::vector<char> staging;
  };
  std::vector<Staged> staged_;
  std::vector<std::vector<char>> staging_free_;  // reused across calls
  std::uint64_t sequence_ = 0;                   // collectives started
  std::uint32_t tag_ = kCollectiveTagBit;
  // The call in progress, named only when an error needs it.
  std::string_view call_kind_ = "";
  bool call_numbered_ = false;
  std::string call_name() const {
    return call_numbered_ ? std::string(call_kind_) + " #" + std::to_string(sequence_)
                          : std::string(call_kind_);
  }
  Clock::time_point deadline_{};
  std::string broken_;  // why the communicator can no longer be used
};

Communicator::Impl::Impl(const LaunchInfo& launch, const Options& options)
    : options_(options), rank_(launch.rank), size_(launch.world_size) {
  log::set_rank(rank_);
  if (options_.chunk_bytes == 0) throw InvalidArgument("communicator", "chunk_bytes must be > 0");
  if (options_.sockets_per_peer < 1 || options_.sockets_per_peer > 64)
    throw InvalidArgument("communicator", "sockets_per_peer must be within 1..64");
  auto names = AlgorithmRegistry::instance().all();
  if (options_.algorithm != "auto" &&
      std::none_of(names.begin(), names.end(),
                   [&](const AlgorithmInfo* a) { return a->name == options_.algorithm; })) {
    std::string known = "auto";
    for (auto* a : names) known += ", " + a->name;
    throw InvalidArgument("communicator",
                          "unknown algorithm '" + options_.algorithm + "' (known: " + known + ")",
                          rank_);
  }
  node_name_ = node_name_of(rank_, size_);
  bootstrap(launch, Clock::now() + options_.timeout);
}

void Communicator::Impl::bootstrap(const LaunchInfo& launch, Clock::time_point deadline) {
  // A forced transport is checked before anyone waits on this rank.
  if (options_.transport != "auto" &&
      TransportRegistry::instance().find(options_.transport) == nullptr) {
    std::string known = "auto";
    for (const auto& n : TransportRegistry::instance().names()) known += ", " + n;
    throw InvalidArgument("communicator",
                          "unknown transport '" + options_.transport + "' (known: " + known + ")",
                          rank_);
  }
  TransportSetup setup;
  setup.rank = rank_;
  setup.size = size_;
  setup.options = &options_;
  setup.deadline = deadline;
  std::vector<std::string> nodes{node_name_};  // of each rank
  if (size_ > 1) {
    net::Endpoint master{launch.master_addr, launch.master_port};
    if (rank_ == 0) {
      net::Fd listener = launch.store_listen_fd >= 0
                             ? net::Fd(launch.store_listen_fd)
                             : net::listen_on(net::numeric_address(master.host), master.port);
      store_server_ = std::make_unique<StoreServer>(std::move(listener));
      master = store_server_->endpoint();
    }
    store_ = std::make_unique<StoreClient>(master, deadline, rank_);
    if (rank_ == 0) {
      std::random_device device;
      std::uint64_t job = (static_cast<std::uint64_t>(device()) << 32) ^ device();
      store_->set("job", std::to_string(job));
    }
    auto job = store_->get("job", deadline);
    if (!job) throw TimeoutError("rendezvous", "rank 0 did not publish the job id", rank_, 0);
    setup.job_id = std::stoull(*job);
    setup.store = store_.get();
    setup.listen_address = options_.socket_ifname.empty()
                               ? net::address_reaching(master.host)
                               : net::interface_address(options_.socket_ifname);

    nodes = gather_node_names(deadline);
    std::vector<std::string> order;  // hosts numbered by their lowest rank
    for (const auto& n : nodes)
      if (std::find(order.begin(), order.end(), n) == order.end()) order.push_back(n);
    node_count_ = static_cast<int>(order.size());
    node_id_ = static_cast<int>(std::find(order.begin(), order.end(), node_name_) - order.begin());
    local_size_ = static_cast<int>(std::count(nodes.begin(), nodes.end(), node_name_));
    local_rank_ = static_cast<int>(std::count(nodes.begin(), nodes.begin() + rank_, node_name_));
  }
  setup.busy_poll = options_.busy_poll;
  if (setup.busy_poll.count() < 0) {
    const long on_machine = std::count_if(nodes.begin(), nodes.end(), [&](const std::string& n) {
      return machine_of(n) == machine_of(node_name_);
    });
    // With a core per rank, spin briefly. With more ranks than cores, poll longer but yield
    // the core between polls: the peer being waited for is likely the one that needs it, and
    // gets it at once instead of after a sleep and a wake-up.
    const bool oversubscribed = on_machine > ::sysconf(_SC_NPROCESSORS_ONLN);
    setup.busy_poll = std::chrono::microseconds(oversubscribed ? 1000 : 50);
    setup.poll_yields = oversubscribed;
  }
  // Per pair of ranks: the forced transport, else shared memory within a host and TCP across.
  std::vector<std::string> choice(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r)
    choice[static_cast<std::size_t>(r)] = options_.transport != "auto" ? options_.transport
                                          : nodes[static_cast<std::size_t>(r)] == node_name_
                                              ? "shm"
                                              : "tcp";
  route_.assign(static_cast<std::size_t>(size_), nullptr);
  const std::vector<std::string> candidates = options_.transport != "auto"
                                                  ? std::vector<std::string>{options_.transport}
                                                  : std::vector<std::string>{"shm", "tcp"};
  for (const std::string& name : candidates) {
    setup.peers.clear();
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && choice[static_cast<std::size_t>(r)] == name) setup.peers.push_back(r);
    // A world of one still gets its forced (or default) transport, serving no peer.
    if (setup.peers.empty() && !(size_ == 1 && name == choice[0])) continue;
    auto& transport =
        transports_.emplace_back(TransportRegistry::instance().find(name)->create(setup));
    for (int r : setup.peers) route_[static_cast<std::size_t>(r)] = transport.get();
    transport_name_ += (transport_name_.empty() ? "" : "+") + name;
  }
  log::debug("communicator ready: " + std::to_string(size_) + " ranks, " +
             std::to_string(node_count_) + " host(s), transport " + transport_name_);
}

std::vector<std::string> Communicator::Impl::gather_node_names(Clock::time_point deadline) {
  store_->set("node/" + std::to_string(rank_), node_name_);
  std::vector<std::string> nodes(static_cast<std::size_t>(size_));
  std::vector<int> missing;
  bool store_gone = false;  // rank 0 gave up first: what was not published stays missing
  for (int r = 0; r < size_; ++r) {
    // After the first rank is found missing, only look at what the others already published.
    std::optional<std::string> value;
    if (!store_gone) try {
        value = store_->get("node/" + std::to_string(r), missing.empty() ? deadline : Clock::now());
      } catch (const PeerError&) {
        store_gone = true;
      }
    if (value)
      nodes[static_cast<std::size_t>(r)] = *value;
    else
      missing.push_back(r);
  }
  if (!missing.empty()) {
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    throw TimeoutError(
        "rendezvous",
        "rank(s) " + list + " of " + std::to_string(size_) + " did not join within the timeout (" +
            seconds_text(options_.timeout) +
            ", ARCOLL_TIMEOUT): did they start, with the same master address?" +
            (store_gone ? " (rank 0 gave up first and closed the rendezvous store)" : ""),
        rank_, missing.front());
  }
  return nodes;
}

RequestPtr Communicator::Impl::start(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                                     std::uint32_t tag,
                                     std::optional<Request::Reduction> reduction) {
  auto request = std::make_shared<Request>();
  request->kind = kind;
  request->peer = peer;
  request->tag = tag;
  request->buffer = buffer;
  request->bytes = bytes;
  request->reduction = reduction;
  route_[static_cast<std::size_t>(peer)]->post(request);
  return request;
}

RequestPtr Communicator::Impl::irecv_reduce(int peer, void* buffer, const void* with,
                                            std::size_t count, DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  const Request::Reduction reduction{with, type, op};
  if (route_[static_cast<std::size_t>(peer)]->reduces_on_receive())
    return start(Request::Kind::recv, peer, buffer, bytes, tag_, reduction);
  std::vector<char> staging;
  if (!staging_free_.empty()) {
    staging = std::move(staging_free_.back());
    staging_free_.pop_back();
  }
  staging.resize(bytes);
  RequestPtr request = start(Request::Kind::recv, peer, staging.data(), bytes, tag_);
  staged_.push_back({request, buffer, reduction, std::move(staging)});
  return request;
}

void Communicator::Impl::wait(const RequestPtr& request) {
  while (!request->done) {
    if (auto failure = transport_failure()) std::rethrow_exception(failure);
    if (Clock::now() >= deadline_) {
      throw TimeoutError(call_name(),
                         "no progress within " + seconds_text(options_.timeout) +
                             " (ARCOLL_TIMEOUT) waiting for the " + request->describe() +
                             ": rank " + std::to_string(request->peer) +
                             " is not responding (hung, stopped, or not in this call)",
                         rank_, request->peer);
    }
    Transport* own = route_[static_cast<std::size_t>(request->peer)];
    if (transports_.size() == 1) {
      own->progress(deadline_);
      continue;
    }
    for (const auto& t : transports_)
      if (t.get() != own) t->progress(Clock::now());
    own->progress(std::min(deadline_, Clock::now() + kMixedWaitSlice));
  }
  if (request->error) std::rethrow_exception(request->error);
  auto staged = std::find_if(staged_.begin(), staged_.end(),
                             [&](const Staged& s) { return s.request == request; });
  if (staged != staged_.end()) {
    const Request::Reduction& r = staged->reduction;
    kernels::reduce(staged->destination, r.with, staged->staging.data(),
                    request->bytes / size_of(r.type), r.type, r.op);
    staging_free_.push_back(std::move(staged->staging));
    staged_.erase(staged);
  }
}

void* Communicator::Impl::scratch(std::size_t bytes, int slot) {
  if (scratch_.size() <= static_cast<std::size_t>(slot))
    scratch_.resize(static_cast<std::size_t>(slot) + 1);
  auto& buffer = scratch_[static_cast<std::size_t>(slot)];
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

void Communicator::Impl::check_buffer(const char* operation, const void* buffer, std::size_t count,
                                      DataType type, std::size_t blocks) {
  if (static_cast<unsigned>(type) > static_cast<unsigned>(DataType::i64))
    throw InvalidArgument(operation, "unknown data type", rank_);
  // Bytes must fit in 63 bits, with room for the size() blocks of gathered buffers.
  const std::size_t limit = (std::numeric_limits<std::size_t>::max() >> 1) / size_of(type) /
                            static_cast<std::size_t>(size_);
  if (count > limit)
    throw InvalidArgument(operation, "count " + std::to_string(count) + " overflows", rank_);
  if (buffer == nullptr && count * blocks != 0)
    throw InvalidArgument(operation, "null buffer with count " + std::to_string(count * blocks),
                          rank_);
}

std::string Communicator::Impl::algorithm_for(Collective collective, std::size_t bytes) const {
  if (options_.algorithm != "auto" &&
      AlgorithmRegistry::instance().find(options_.algorithm, collective) != nullptr)
    return options_.algorithm;
  if (collective == Collective::allreduce && bytes <= kSmallAllreduceBytes)
    return kSmallAllreduceAlgorithm;
  return kDefaultAlgorithm.at(collective);
}

void Communicator::Impl::fail(const Error& e, const std::string& operation) {
  broken_ = e.what();
  for (const auto& t : transports_) {
    log::debug(operation + " failed; " + std::string(t->name()) + " transfers pending:\n" +
               t->pending_state());
    t->abort(e.what());
  }
  throw_error(e.code(), operation, e.message(), rank_, e.peer());
}

void Communicator::Impl::run(Collective collective, const CollectiveArgs& args) {
  // Validation happens before the call gets its number.
  auto next_name = [&] {
    return std::string(to_string(collective)) + " #" + std::to_string(sequence_ + 1);
  };
  check_usable(next_name);
  if (static_cast<unsigned>(args.op) > static_cast<unsigned>(ReduceOp::avg))
    throw InvalidArgument(next_name(), "unknown reduction operator", rank_);
  if (!is_supported(args.type, args.op))
    throw InvalidArgument(next_name(),
                          "avg is only defined for floating-point types, not " +
                              std::string(to_string(args.type)) +
                              " (integer averages would truncate): use sum and divide",
                          rank_);
  if (args.root < 0 || args.root >= size_)
    throw InvalidArgument(next_name(),
                          "root " + std::to_string(args.root) + " is not a rank of this " +
                              std::to_string(size_) + "-rank communicator",
                          rank_);
  ++sequence_;
  tag_ = kCollectiveTagBit | static_cast<std::uint32_t>(sequence_ & 0x7fffffffu);
  call_kind_ = to_string(collective);
  call_numbered_ = true;
  deadline_ = Clock::now() + options_.timeout;
  staged_.clear();  // what a failed call left; the communicator is broken then anyway
  const CollectiveFn* fn = AlgorithmRegistry::instance().find(
      algorithm_for(collective, args.count * size_of(args.type)), collective);
  CollectiveArgs effective = args;
  if (args.op == ReduceOp::avg) effective.op = ReduceOp::sum;
  try {
    (*fn)(*this, effective);
    // allreduce and reduce_scatter both leave args.count reduced elements in recv.
    if (args.op == ReduceOp::avg) kernels::divide_by(args.recv, args.count, args.type, size_);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::invalid_argument && transport_failure() == nullptr)
      throw_error(e.code(), call_name(), e.message(), rank_, e.peer());
    fail(e, call_name());
  }
}

void Communicator::Impl::point_to_point(Request::Kind kind, void* buffer, std::size_t bytes,
                                        int peer, int tag) {
  const char* operation = kind == Request::Kind::send ? "send" : "recv";
  check_usable([&] { return std::string(operation); });
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw InvalidArgument(operation,
                          "peer " + std::to_string(peer) + " is not another rank of this " +
                              std::to_string(size_) + "-rank communicator",
                          rank_);
  if (tag < 0) throw InvalidArgument(operation, "tags must be >= 0", rank_, peer);
  if (buffer == nullptr && bytes != 0)
    throw InvalidArgument(operation, "null buffer with " + std::to_string(bytes) + " bytes", rank_,
                          peer);
  call_kind_ = operation;
  call_numbered_ = false;
  deadline_ = Clock::now() + options_.timeout;
  try {
    wait(start(kind, peer, buffer, bytes, static_cast<std::uint32_t>(tag)));
  } catch (const Error& e) {
    fail(e, operation);
  }
}

// ---- Communicator ----------------------------------------------------------------------

Communicator::Communicator(const LaunchInfo& launch, const Options& options)
    : impl_(std::make_unique<Impl>(launch, options)) {}

std::unique_ptr<Communicator> Communicator::from_env() {
  return std::make_unique<Communicator>(detect_launch(), Options::from_env());
}

Communicator::~Communicator() = default;

int Communicator::rank() const {
  return impl_->rank_;
}
int Communicator::size() const {
  return impl_->size_;
}
int Communicator::local_rank() const {
  return impl_->local_rank_;
}
int Communicator::local_size() const {
  return impl_->local_size_;
}
int Communicator::node_id() const {
  return impl_->node_id_;
}
int Communicator::node_count() const {
  return impl_->node_count_;
}
const std::string& Communicator::node_name() const {
  return impl_->node_name_;
}
const Options& Communicator::options() const {
  return impl_->options_;
}
std::string Communicator::transport_name() const {
  return impl_->transport_name_;
}
std::string Communicator::algorithm_name() const {
  if (AlgorithmRegistry::instance().find(impl_->options_.algorithm, Collective::allreduce))
    return impl_->options_.algorithm;
  return std::string(kSmallAllreduceAlgorithm) + " up to " +
         std::to_string(kSmallAllreduceBytes / 1024) + " KiB, " +
         kDefaultAlgorithm.at(Collective::allreduce) + " above";
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op) {
  impl_->check_buffer("allreduce", send, count, type);
  impl_->check_buffer("allreduce", recv, count, type);
  impl_->run(Collective::allreduce, {send, recv, count, type, op, 0});
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DataType type, ReduceOp op) {
  impl_->check_buffer("reduce_scatter", send, recv_count, type, static_cast<std::size_t>(size()));
  impl_->check_buffer("reduce_scatter", recv, recv_count, type);
  impl_->run(Collective::reduce_scatter, {send, recv, recv_count, type, op, 0});
}

void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType type) {
  impl_->check_buffer("allgather", send, send_count, type);
  impl_->check_buffer("allgather", recv, send_count, type, static_cast<std::size_t>(size()));
  impl_->run(Collective::allgather, {send, recv, send_count, type, ReduceOp::sum, 0});
}

void Communicator::broadcast(void* buffer, std::size_t count, DataType type, int root) {
  impl_->check_buffer("broadcast", buffer, count, type);
  impl_->run(Collective::broadcast, {buffer, buffer, count, type, ReduceOp::sum, root});
}

void Communicator::barrier() {
  impl_->run(Collective::barrier, {nullptr, nullptr, 0, DataType::u8, ReduceOp::sum, 0});
}

void Communicator::send(const void* buffer, std::size_t bytes, int peer, int tag) {
  impl_->point_to_point(Request::Kind::send, const_cast<void*>(buffer), bytes, peer, tag);
}

void Communicator::recv(void* buffer, std::size_t bytes, int peer, int tag) {
  impl_->point_to_point(Request::Kind::recv, buffer, bytes, peer, tag);
}

}  // namespace arcoll
