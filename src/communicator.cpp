#include "arcoll/communicator.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <unordered_map>

#include "algorithms/algorithm.hpp"
#include "arcoll/error.hpp"
#include "arcoll/host.hpp"
#include "arcoll/tuning.hpp"
#include "src/call_signature.hpp"
#include "src/crc32c.hpp"
#include "src/env.hpp"
#include "src/log.hpp"
#include "src/reduce.hpp"
#include "src/store.hpp"
#include "transports/transport.hpp"

namespace arcoll {
namespace {

using net::Clock;

// Tags of collectives have the top bit set (user point-to-point tags must not), the channel
// in the next bits and the call's sequence number in the low 24.
constexpr std::uint32_t kCollectiveTagBit = 0x80000000u;
constexpr int kChannelShift = 24;
constexpr std::uint32_t kSequenceMask = (1u << kChannelShift) - 1;
static_assert(kMaxChannels <= 64, "channels must fit in bits 24..29 of a tag");

// The algorithm each collective but all-reduce uses when Options::algorithm is "auto" or
// names an algorithm that does not implement that collective. All-reduce under auto takes
// the cost model's choice.
const std::map<Collective, std::string> kDefaultAlgorithm = {
    {Collective::allreduce, "ring"},        {Collective::reduce_scatter, "ring"},
    {Collective::allgather, "ring"},        {Collective::broadcast, "ring"},
    {Collective::barrier, "dissemination"},
};

LinkCost link_cost(const TransportCosts& c) {
  return {c.latency_us * 1e-6, 1.0 / (c.bandwidth_gbs * 1e9), 1.0 / (c.reduce_gbs * 1e9)};
}

void check_algorithm(const std::string& name, int rank) {
  auto names = AlgorithmRegistry::instance().all();
  if (name == "auto" || std::any_of(names.begin(), names.end(),
                                    [&](const AlgorithmInfo* a) { return a->name == name; }))
    return;
  std::string known = "auto";
  for (auto* a : names) known += ", " + a->name;
  throw InvalidArgument("communicator", "unknown algorithm '" + name + "' (known: " + known + ")",
                        rank);
}

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
// Marks the rendezvous entry of a rank that failed before it could join, followed by why.
const std::string kFailedToJoin =
    "\x01"
    "failed: ";

// How often a blocked wait looks for an abort() from another thread.
constexpr auto kAbortCheckSlice = std::chrono::milliseconds(5);

// The settings that shape messages, which every rank must share; rank 0's are published and
// the others compare theirs.
std::vector<std::pair<std::string, std::string>> shared_settings(const Options& o) {
  return {{"ARCOLL_CHECKSUM", o.checksum ? "1" : "0"},
          {"ARCOLL_WIRE", std::string(to_string(o.wire))},
          {"ARCOLL_CHUNK_BYTES", std::to_string(o.chunk_bytes)},
          {"ARCOLL_CHANNELS", std::to_string(o.channels)}};
}

std::string hex32(std::uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

}  // namespace

class Communicator::Impl final : public PointToPoint {
 public:
  Impl(const LaunchInfo& launch, const Options& options);
  ~Impl() override = default;

  // PointToPoint, as algorithms see it during a collective.
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int node_of(int rank) const override { return node_index_[static_cast<std::size_t>(rank)]; }
  int numa_of(int rank) const override { return numa_of_[static_cast<std::size_t>(rank)]; }
  std::size_t chunk_bytes() const override { return call_chunk_bytes_; }
  const Layout& layout() const override { return layout_; }
  RequestPtr isend(int peer, const void* buffer, std::size_t bytes, int channel) override;
  RequestPtr irecv(int peer, void* buffer, std::size_t bytes, int channel) override;
  RequestPtr irecv_reduce(int peer, void* buffer, const void* with, std::size_t count,
                          DataType type, ReduceOp op, int channel) override;
  void wait(const RequestPtr& request) override;
  void* scratch(std::size_t bytes, int slot) override;
  void round_to_wire(void* data, std::size_t count, DataType type) override {
    if (call_wire_ != DataType::f32 && type == DataType::f32) round_through_wire(data, count);
  }

  void set_tuning(const Tuning& tuning) {
    std::lock_guard call(call_mutex_);
    tuning_ = tuning;
    apply_tuning();
  }
  // Runs one collective with validation, deadline and error reporting.
  void run(Collective collective, const CollectiveArgs& args);
  // One send, one receive, or both at once (sendrecv); `operation` names the call in errors.
  struct Transfer {
    Request::Kind kind;
    void* buffer;
    std::size_t bytes;
    int peer;
  };
  void point_to_point(const char* operation, std::initializer_list<Transfer> transfers, int tag);
  // `blocks` blocks of `count` elements each.
  void check_buffer(const char* operation, const void* buffer, std::size_t count, DataType type,
                    std::size_t blocks = 1);
  // Buffers of a call that overlap are allowed only in the call's in-place form, where
  // send == recv + in_place_offset elements.
  void check_overlap(const char* operation, const void* send, std::size_t send_count,
                     const void* recv, std::size_t recv_count, DataType type,
                     std::ptrdiff_t in_place_offset);
  template <class Name>
  void check_usable(const Name& operation) const {
    if (broken_.empty() && abort_requested_.load(std::memory_order_acquire))
      throw PeerError(operation(), abort_text() + "; destroy this communicator", rank_);
    if (!broken_.empty())
      throw PeerError(operation(),
                      "this communicator can no longer be used after an earlier failure (" +
                          broken_ + "); destroy it and create a new one",
                      rank_);
  }
  // The algorithm (and chunk) a collective of `bytes` runs with; valid until the next call.
  const Plan& plan_for(Collective collective, std::size_t bytes);
  void set_algorithm(const std::string& name) {
    options_.algorithm = name;
    fixed_plans_.clear();
  }
  void set_wire(DataType wire) {
    if (wire != DataType::f32 && wire != DataType::f16 && wire != DataType::bf16)
      throw InvalidArgument("set_wire", "the wire format must be f32, f16 or bf16", rank_);
    options_.wire = wire;
    fixed_plans_.clear();
  }
  Plan predict(const std::string& algorithm, std::size_t bytes) const;
  void abort(const std::string& reason);

  Options options_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int node_id_ = 0;
  int node_count_ = 1;
  std::string node_name_;
  std::string transport_name_;
  std::vector<int> node_index_;  // host of each rank
  std::vector<int> numa_of_;     // NUMA node each rank ran on when it joined; -1 unknown
  Layout layout_;
  std::vector<Transport*> route_;  // which transport reaches each rank

 private:
  RequestPtr start(Request::Kind kind, int peer, void* buffer, std::size_t bytes, std::uint32_t tag,
                   std::optional<Request::Reduction> reduction = {});
  void bootstrap(const LaunchInfo& launch, Clock::time_point deadline);
  // The cost model's link costs from tuning_ (built-in figures where it has none).
  void apply_tuning();
  // Every rank's host name, and into numa_of_ the NUMA node each runs on.
  std::vector<std::string> gather_node_names(Clock::time_point deadline);
  [[noreturn]] void fail(const Error& e, const std::string& operation);

  std::unique_ptr<StoreServer> store_server_;
  std::unique_ptr<StoreClient> store_;
  // Several transports when ranks share some hosts but not all.
  std::vector<std::unique_ptr<Transport>> transports_;
  std::exception_ptr transport_failure() const {
    for (const auto& t : transports_)
      if (auto f = t->failure()) return f;
    return nullptr;
  }
  RequestPtr post(Request::Kind kind, int peer, void* buffer, std::size_t bytes, std::uint32_t tag,
                  std::optional<Request::Reduction> reduction);
  std::uint32_t collective_tag(int channel) const {
    return tag_ | static_cast<std::uint32_t>(channel) << kChannelShift;
  }
  // ARCOLL_CHECKSUM: throws naming the link when a received message does not match the
  // checksum its sender computed.
  void verify_checksum(const Request& request, std::uint32_t sent);
  void check_shared_settings(Clock::time_point deadline);
  // After a collective's wait timed out: the ranks that did not also time out in this call
  // (hung, dead, or in another call), as "; ranks not waiting in this call: 1, 4", found
  // through the store in a short survey; empty when all were or the store cannot tell.
  std::string ranks_absent_from_call();
  std::vector<char> staging_buffer(std::size_t bytes);
  void finish_staged(const Request& request);
  void apply_error_feedback(const CollectiveArgs& args);
  void round_through_wire(void* data, std::size_t count);

  std::vector<std::vector<char>> scratch_;
  // Receives that land in `staging` first, finished when waited for: reduced into
  // `destination` (transports that cannot reduce on receive, or ARCOLL_CHECKSUM, which checks
  // a message before combining it), or widened from the 16-bit wire format (and reduced) in
  // mixed precision. Sends of mixed precision go from `staging`. Under ARCOLL_CHECKSUM every
  // message is followed by its CRC32C, `trailer`, held in `checksum`.
  struct Staged {
    void* destination = nullptr;
    std::optional<Request::Reduction> reduction;
    std::vector<char> staging;
    std::uint32_t checksum = 0;
    RequestPtr trailer;
  };
  std::unordered_map<const Request*, Staged> staged_;
  std::vector<std::vector<char>> staging_free_;  // reused across calls
  // Mixed precision: the wire format of the call in progress (f32: none).
  DataType call_wire_ = DataType::f32;
  std::vector<std::uint16_t> wire_block_;  // round_through_wire's 16-bit values
  // Error feedback: the rounding residual of the last all-reduce of each (buffer, count).
  std::map<std::pair<const void*, std::size_t>, std::vector<float>> residuals_;
  std::size_t call_chunk_bytes_ = 0;
  Tuning tuning_;                                     // from Options::tuning_file or set_tuning()
  std::unordered_map<std::size_t, Plan> auto_plans_;  // by all-reduce bytes
  std::map<Collective, Plan> fixed_plans_;            // the rest, until set_algorithm
  std::uint64_t sequence_ = 0;                        // collectives started
  std::uint32_t tag_ = kCollectiveTagBit;
  // The call in progress, named only when an error needs it.
  std::string_view call_kind_ = "";
  bool call_numbered_ = false;
  std::uint64_t call_signature_ = 0;  // of the collective running; 0 for point-to-point
  std::string call_name() const {
    return call_numbered_ ? std::string(call_kind_) + " #" + std::to_string(sequence_)
                          : std::string(call_kind_);
  }
  Clock::time_point deadline_{};
  std::string broken_;  // why the communicator can no longer be used

  // abort() may come from another thread while a call blocks: the call thread holds
  // call_mutex_ for the whole call and checks abort_requested_ between waits.
  std::mutex call_mutex_;
  std::atomic<bool> abort_requested_{false};
  mutable std::mutex abort_mutex_;  // guards abort_reason_
  std::string abort_reason_;
  std::string abort_text() const {
    std::lock_guard lock(abort_mutex_);
    return "abort() called: " + abort_reason_;
  }
  // ARCOLL_FAULT_CORRUPT=<rank>:<n>, for testing the checksum: rank <rank> flips a bit of
  // the n-th non-empty message it checks, as a faulty link would.
  std::uint64_t corrupt_at_ = 0;
  std::uint64_t checked_messages_ = 0;
};

Communicator::Impl::Impl(const LaunchInfo& launch, const Options& options)
    : options_(options), rank_(launch.rank), size_(launch.world_size) {
  log::set_rank(rank_);
  if (options_.chunk_bytes == 0) throw InvalidArgument("communicator", "chunk_bytes must be > 0");
  if (options_.sockets_per_peer < 1 || options_.sockets_per_peer > 64)
    throw InvalidArgument("communicator", "sockets_per_peer must be within 1..64");
  if (options_.channels < 1 || options_.channels > kMaxChannels)
    throw InvalidArgument("communicator",
                          "channels must be within 1.." + std::to_string(kMaxChannels));
  if (options_.wire != DataType::f32 && options_.wire != DataType::f16 &&
      options_.wire != DataType::bf16)
    throw InvalidArgument("communicator", "the wire format must be f32, f16 or bf16");
  call_chunk_bytes_ = options_.chunk_bytes;
  // Read before the rendezvous: a bad file fails this rank before anyone waits for it.
  tuning_ = options_.tuning_file.empty() ? Tuning{} : load_tuning(options_.tuning_file);
  check_algorithm(options_.algorithm, rank_);
  node_name_ = node_name_of(rank_, size_);
  if (auto fault = env::get("ARCOLL_FAULT_CORRUPT")) {
    int fault_rank = -1;
    unsigned long long nth = 0;
    if (std::sscanf(fault->c_str(), "%d:%llu", &fault_rank, &nth) != 2 || nth == 0)
      throw ConfigurationError(
          "environment", "ARCOLL_FAULT_CORRUPT='" + *fault + "' must be <rank>:<n>, n >= 1", rank_);
    if (fault_rank == rank_) corrupt_at_ = nth;
  }
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
      store_server_ = std::make_unique<StoreServer>(std::move(listener), launch.job_token);
      master = store_server_->endpoint();
    }
    store_ = std::make_unique<StoreClient>(master, deadline, rank_, launch.job_token);
    if (rank_ == 0 && launch.job_token.empty())
      log::warn(
          "no job token (ARCOLL_JOB_TOKEN): connections to this job are checked for being "
          "arcoll's, not for being this job's; launchers other than arcoll's and mpirun "
          "should set one");
    if (rank_ == 0) {
      std::random_device device;
      std::uint64_t job = (static_cast<std::uint64_t>(device()) << 32) ^ device();
      store_->set("job", std::to_string(job));
    }
    auto job = store_->get("job", deadline);
    if (!job) throw TimeoutError("rendezvous", "rank 0 did not publish the job id", rank_, 0);
    setup.job_id = std::stoull(*job);
    try {
      check_shared_settings(deadline);
    } catch (const Error& e) {
      // In place of this rank's host name: the others stop waiting for it, naming the cause.
      store_->set("node/" + std::to_string(rank_), kFailedToJoin + e.what());
      throw;
    }
    setup.job_token = launch.job_token;
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
    for (const auto& n : nodes)
      node_index_.push_back(
          static_cast<int>(std::find(order.begin(), order.end(), n) - order.begin()));
  } else {
    node_index_ = {0};
    numa_of_ = {numa_node_of_cpu(::sched_getcpu())};
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
  layout_.ranks = size_;
  layout_.hosts = node_count_;
  layout_.ranks_per_host = local_size_;
  for (int r = 0; r < size_; ++r)
    if (std::count(node_index_.begin(), node_index_.end(),
                   node_index_[static_cast<std::size_t>(r)]) != local_size_)
      layout_.ranks_per_host = 0;
  apply_tuning();
  layout_.chunk_bytes = options_.chunk_bytes;
  layout_.channels = options_.channels;
  log::debug("communicator ready: " + std::to_string(size_) + " ranks, " +
             std::to_string(node_count_) + " host(s), transport " + transport_name_);
}

void Communicator::Impl::apply_tuning() {
  // Transports missing from the tuning keep their built-in costs.
  const Tuning defaults = default_tuning();
  auto costs_of = [&](const std::string& transport) {
    for (const Tuning* t : {static_cast<const Tuning*>(&tuning_), &defaults})
      if (auto it = t->transports.find(transport); it != t->transports.end())
        return link_cost(it->second);
    return LinkCost{};
  };
  layout_.intra = costs_of(options_.transport != "auto" ? options_.transport : "shm");
  layout_.inter = costs_of(options_.transport != "auto" ? options_.transport : "tcp");
}

std::string Communicator::Impl::ranks_absent_from_call() {
  if (!call_numbered_ || store_ == nullptr) return "";
  // The ranks waiting in the same call time out within moments of each other: each says so
  // and looks for the others' word for this long.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  const std::string prefix = "timed-out/" + std::to_string(sequence_) + "/";
  std::string absent;
  try {
    store_->set(prefix + std::to_string(rank_), "", until);
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && !store_->get(prefix + std::to_string(r), until))
        absent += (absent.empty() ? "" : ", ") + std::to_string(r);
  } catch (const Error&) {
    return "";  // the store went with rank 0
  }
  return absent.empty() ? "" : "; ranks not waiting in this call: " + absent;
}

void Communicator::Impl::check_shared_settings(Clock::time_point deadline) {
  std::string mine;
  for (const auto& [name, value] : shared_settings(options_)) mine += name + "=" + value + "\n";
  if (rank_ == 0) store_->set("settings", mine);
  auto theirs = store_->get("settings", deadline);
  if (!theirs) throw TimeoutError("rendezvous", "rank 0 did not publish its settings", rank_, 0);
  if (*theirs == mine) return;
  for (const auto& [name, value] : shared_settings(options_)) {
    const std::string key = name + "=";
    const std::size_t at = theirs->find(key);
    const std::string other =
        at == std::string::npos
            ? "unset"
            : theirs->substr(at + key.size(), theirs->find('\n', at) - at - key.size());
    if (other != value)
      throw ConfigurationError("rendezvous",
                               name + " is " + value + " on this rank but " + other +
                                   " on rank 0: every rank must use the same",
                               rank_, 0);
  }
}

std::vector<std::string> Communicator::Impl::gather_node_names(Clock::time_point deadline) {
  store_->set("node/" + std::to_string(rank_),
              node_name_ + '\n' + std::to_string(numa_node_of_cpu(::sched_getcpu())));
  std::vector<std::string> nodes(static_cast<std::size_t>(size_));
  numa_of_.assign(static_cast<std::size_t>(size_), -1);
  std::vector<int> missing;
  std::optional<PeerError> failed;  // the first rank that said it could not join
  int present = 0;                  // other ranks that published their host
  bool store_gone = false;          // rank 0 gave up first: what was not published stays missing
  for (int r = 0; r < size_; ++r) {
    // After the first rank is found missing or failed, only look at what the others already
    // published.
    const bool waiting = missing.empty() && !failed;
    std::optional<std::string> value;
    if (!store_gone) try {
        value = store_->get("node/" + std::to_string(r), waiting ? deadline : Clock::now());
      } catch (const PeerError&) {
        store_gone = true;
      }
    if (value && value->starts_with(kFailedToJoin)) {
      if (!failed)
        failed.emplace(
            "rendezvous",
            "rank " + std::to_string(r) + " could not join: " + value->substr(kFailedToJoin.size()),
            rank_, r);
      continue;
    }
    if (value) {
      const std::size_t end = value->rfind('\n');
      nodes[static_cast<std::size_t>(r)] = value->substr(0, end);
      if (end != std::string::npos)
        numa_of_[static_cast<std::size_t>(r)] = std::atoi(value->c_str() + end + 1);
      present += r != rank_;
    } else
      missing.push_back(r);
  }
  // Rank 0 holds the store: when the rendezvous failed, it keeps the store until the others
  // have read why (or a short while), so that they report the cause and not its absence.
  if (rank_ != 0 && !store_gone) try {
      store_->add("rendezvous/read", 1);
    } catch (const PeerError&) {
    }
  if (rank_ == 0 && (failed || !missing.empty())) {
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < until && store_->add("rendezvous/read", 0) < present)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (failed) throw *failed;
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
  request->signature = call_signature_;
  request->buffer = buffer;
  request->bytes = bytes;
  request->reduction = reduction;
  route_[static_cast<std::size_t>(peer)]->post(request);
  return request;
}

std::vector<char> Communicator::Impl::staging_buffer(std::size_t bytes) {
  std::vector<char> staging;
  if (!staging_free_.empty()) {
    staging = std::move(staging_free_.back());
    staging_free_.pop_back();
  }
  staging.resize(bytes);
  return staging;
}

RequestPtr Communicator::Impl::post(Request::Kind kind, int peer, void* buffer, std::size_t bytes,
                                    std::uint32_t tag,
                                    std::optional<Request::Reduction> reduction) {
  const bool narrowed = call_wire_ != DataType::f32;
  if (!narrowed && !options_.checksum &&
      (!reduction || route_[static_cast<std::size_t>(peer)]->reduces_on_receive()))
    return start(kind, peer, buffer, bytes, tag, reduction);
  // Through a staging buffer: f32 elements narrowed to the 16-bit wire format, or a message to
  // be reduced once it has landed (and, under ARCOLL_CHECKSUM, been checked).
  const bool staging = narrowed || reduction.has_value();
  const std::size_t count = bytes / sizeof(float);
  Staged staged;
  staged.destination = buffer;
  staged.reduction = reduction;
  if (staging) staged.staging = staging_buffer(narrowed ? count * 2 : bytes);
  if (kind == Request::Kind::send) {
    staged.destination = nullptr;
    if (narrowed)
      kernels::narrow(staged.staging.data(), call_wire_, static_cast<const float*>(buffer), count);
  }
  void* wire = staging ? staged.staging.data() : buffer;
  const std::size_t wire_bytes = staging ? staged.staging.size() : bytes;
  RequestPtr request = start(kind, peer, wire, wire_bytes, tag, {});
  Staged& entry = staged_.emplace(request.get(), std::move(staged)).first->second;
  if (options_.checksum) {
    if (kind == Request::Kind::send) entry.checksum = crc32c(wire, wire_bytes);
    entry.trailer = start(kind, peer, &entry.checksum, sizeof entry.checksum, tag, {});
  }
  return request;
}

void Communicator::Impl::verify_checksum(const Request& request, std::uint32_t sent) {
  auto* bytes = static_cast<unsigned char*>(request.buffer);
  if (request.bytes > 0 && ++checked_messages_ == corrupt_at_) bytes[request.bytes / 2] ^= 0x10;
  const std::uint32_t received = crc32c(bytes, request.bytes);
  if (received == sent) return;
  Transport* link = route_[static_cast<std::size_t>(request.peer)];
  throw ProtocolError(call_name(),
                      "checksum mismatch (ARCOLL_CHECKSUM): a message of " +
                          std::to_string(request.bytes) + " B on the link from rank " +
                          std::to_string(request.peer) + " to rank " + std::to_string(rank_) +
                          " over " + std::string(link->name()) + " arrived corrupted (CRC32C " +
                          hex32(received) + ", sent as " + hex32(sent) + ")",
                      rank_, request.peer);
}

RequestPtr Communicator::Impl::isend(int peer, const void* buffer, std::size_t bytes, int channel) {
  return post(Request::Kind::send, peer, const_cast<void*>(buffer), bytes, collective_tag(channel),
              {});
}

RequestPtr Communicator::Impl::irecv(int peer, void* buffer, std::size_t bytes, int channel) {
  return post(Request::Kind::recv, peer, buffer, bytes, collective_tag(channel), {});
}

RequestPtr Communicator::Impl::irecv_reduce(int peer, void* buffer, const void* with,
                                            std::size_t count, DataType type, ReduceOp op,
                                            int channel) {
  return post(Request::Kind::recv, peer, buffer, count * size_of(type), collective_tag(channel),
              Request::Reduction{with, type, op});
}

void Communicator::Impl::finish_staged(const Request& request) {
  auto it = staged_.find(&request);
  if (it == staged_.end()) return;
  Staged& staged = it->second;
  if (staged.trailer) {
    wait(staged.trailer);
    if (request.kind == Request::Kind::recv) verify_checksum(request, staged.checksum);
  }
  if (staged.destination != nullptr && !staged.staging.empty()) {
    const auto* message = staged.staging.data();
    auto* destination = static_cast<float*>(staged.destination);
    if (call_wire_ == DataType::f32) {
      const Request::Reduction& r = *staged.reduction;
      kernels::reduce(staged.destination, r.with, message, request.bytes / size_of(r.type), r.type,
                      r.op);
    } else if (staged.reduction) {
      kernels::reduce_widened(destination, static_cast<const float*>(staged.reduction->with),
                              message, call_wire_, request.bytes / 2, staged.reduction->op);
    } else {
      kernels::widen(destination, message, call_wire_, request.bytes / 2);
    }
  }
  if (staged.staging.capacity() > 0) staging_free_.push_back(std::move(staged.staging));
  staged_.erase(it);
}

void Communicator::Impl::wait(const RequestPtr& request) {
  while (!request->done) {
    if (auto failure = transport_failure()) std::rethrow_exception(failure);
    if (abort_requested_.load(std::memory_order_acquire))
      throw PeerError(call_name(), abort_text(), rank_);
    const Clock::time_point now = Clock::now();
    if (now >= deadline_) {
      throw TimeoutError(call_name(),
                         "no progress within " + seconds_text(options_.timeout) +
                             " (ARCOLL_TIMEOUT) waiting for the " + request->describe() +
                             ": rank " + std::to_string(request->peer) +
                             " is not responding (hung, stopped, or not in this call)" +
                             ranks_absent_from_call(),
                         rank_, request->peer);
    }
    Transport* own = route_[static_cast<std::size_t>(request->peer)];
    if (transports_.size() == 1) {
      own->progress(std::min(deadline_, now + kAbortCheckSlice));
      continue;
    }
    for (const auto& t : transports_)
      if (t.get() != own) t->progress(now);
    own->progress(std::min(deadline_, Clock::now() + kMixedWaitSlice));
  }
  if (request->error) std::rethrow_exception(request->error);
  finish_staged(*request);
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

void Communicator::Impl::check_overlap(const char* operation, const void* send,
                                       std::size_t send_count, const void* recv,
                                       std::size_t recv_count, DataType type,
                                       std::ptrdiff_t in_place_offset) {
  if (send_count == 0 || recv_count == 0) return;
  const auto s = reinterpret_cast<std::uintptr_t>(send);
  const auto r = reinterpret_cast<std::uintptr_t>(recv);
  const std::size_t element = size_of(type);
  if (s >= r + recv_count * element || r >= s + send_count * element) return;
  if (s - r == static_cast<std::uintptr_t>(in_place_offset * static_cast<std::ptrdiff_t>(element)))
    return;
  throw InvalidArgument(operation,
                        "the send and receive buffers overlap without being the in-place form "
                        "(see communicator.hpp): the result would depend on the algorithm",
                        rank_);
}

Plan Communicator::Impl::predict(const std::string& algorithm, std::size_t bytes) const {
  const auto b = static_cast<double>(bytes);
  return algorithm == "auto" ? cost::best(layout_, b) : cost::predict(algorithm, layout_, b);
}

const Plan& Communicator::Impl::plan_for(Collective collective, std::size_t bytes) {
  // Cached: small collectives should not pay for the model or for copying names.
  if (collective == Collective::allreduce && options_.algorithm == "auto") {
    auto cached = auto_plans_.find(bytes);
    if (cached != auto_plans_.end()) return cached->second;
    if (auto_plans_.size() > 4096) auto_plans_.clear();  // sizes seen by one job stay few
    return auto_plans_[bytes] = predict("auto", bytes);
  }
  auto fixed = fixed_plans_.find(collective);
  if (fixed != fixed_plans_.end()) return fixed->second;
  const bool implemented =
      AlgorithmRegistry::instance().find(options_.algorithm, collective) != nullptr;
  return fixed_plans_[collective] = {
             implemented ? options_.algorithm : kDefaultAlgorithm.at(collective),
             options_.chunk_bytes, 0};
}

void Communicator::Impl::round_through_wire(void* data, std::size_t count) {
  // In cache-sized blocks through a buffer kept across calls: no allocation per round.
  constexpr std::size_t kBlock = 16 * 1024;
  wire_block_.resize(kBlock);
  auto* values = static_cast<float*>(data);
  for (std::size_t i = 0; i < count; i += kBlock) {
    const std::size_t n = std::min(kBlock, count - i);
    kernels::narrow(wire_block_.data(), options_.wire, values + i, n);
    kernels::widen(values + i, wire_block_.data(), options_.wire, n);
  }
}

void Communicator::Impl::apply_error_feedback(const CollectiveArgs& args) {
  auto& residual = residuals_[{args.recv, args.count}];
  residual.resize(args.count, 0.0f);
  // recv = send + what rounding lost last time; the new residual is what it loses now.
  kernels::reduce(args.recv, args.send, residual.data(), args.count, DataType::f32, ReduceOp::sum);
  std::copy_n(static_cast<const float*>(args.recv), args.count, residual.begin());
  round_through_wire(args.recv, args.count);
  const auto* rounded = static_cast<const float*>(args.recv);
  for (std::size_t i = 0; i < args.count; ++i) residual[i] -= rounded[i];
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

void Communicator::Impl::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (abort_requested_.load()) return;
    abort_reason_ = reason;
    abort_requested_.store(true, std::memory_order_release);
  }
  // A call in progress sees the request within kAbortCheckSlice, fails and tells the peers.
  std::lock_guard call(call_mutex_);
  if (!broken_.empty()) return;
  broken_ = abort_text();
  for (const auto& t : transports_) t->abort(broken_);
}

void Communicator::Impl::run(Collective collective, const CollectiveArgs& args) {
  std::lock_guard call(call_mutex_);
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
  tag_ = kCollectiveTagBit | static_cast<std::uint32_t>(sequence_ & kSequenceMask);
  call_kind_ = to_string(collective);
  call_numbered_ = true;
  deadline_ = Clock::now() + options_.timeout;
  staged_.clear();  // what a failed call left; the communicator is broken then anyway
  const bool reduces =
      collective == Collective::allreduce || collective == Collective::reduce_scatter;
  call_wire_ = reduces && args.type == DataType::f32 && size_ > 1 ? options_.wire : DataType::f32;
  const bool narrowed = call_wire_ != DataType::f32;
  const std::size_t bytes = args.count * size_of(args.type);
  const Plan& plan = plan_for(collective, narrowed ? bytes / 2 : bytes);
  call_chunk_bytes_ = plan.chunk_bytes;
  const CollectiveFn* fn = AlgorithmRegistry::instance().find(plan.algorithm, collective);
  call_signature_ =
      pack({collective, args.type, args.op, AlgorithmRegistry::instance().index_of(plan.algorithm),
            args.root, args.count});
  CollectiveArgs effective = args;
  if (args.op == ReduceOp::avg) effective.op = ReduceOp::sum;
  try {
    const bool narrowed_allreduce = narrowed && collective == Collective::allreduce;
    if (narrowed_allreduce && options_.wire_error_feedback) {
      apply_error_feedback(args);
      effective.send = args.recv;
    }
    (*fn)(*this, effective);
    // The rank that finished a segment holds it in f32, the others as it came off the wire:
    // one more rounding makes every rank's result the same.
    if (narrowed_allreduce) round_through_wire(args.recv, args.count);
    // allreduce and reduce_scatter both leave args.count reduced elements in recv.
    if (args.op == ReduceOp::avg) kernels::divide_by(args.recv, args.count, args.type, size_);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::invalid_argument && transport_failure() == nullptr)
      throw_error(e.code(), call_name(), e.message(), rank_, e.peer());
    fail(e, call_name());
  }
}

void Communicator::Impl::point_to_point(const char* operation,
                                        std::initializer_list<Transfer> transfers, int tag) {
  std::lock_guard call(call_mutex_);
  check_usable([&] { return std::string(operation); });
  for (const Transfer& t : transfers) {
    if (t.peer < 0 || t.peer >= size_ || t.peer == rank_)
      throw InvalidArgument(operation,
                            "peer " + std::to_string(t.peer) + " is not another rank of this " +
                                std::to_string(size_) + "-rank communicator",
                            rank_);
    if (t.buffer == nullptr && t.bytes != 0)
      throw InvalidArgument(operation, "null buffer with " + std::to_string(t.bytes) + " bytes",
                            rank_, t.peer);
  }
  if (tag < 0) throw InvalidArgument(operation, "tags must be >= 0", rank_);
  call_kind_ = operation;
  call_numbered_ = false;
  call_signature_ = 0;
  call_wire_ = DataType::f32;
  deadline_ = Clock::now() + options_.timeout;
  staged_.clear();
  try {
    std::vector<RequestPtr> posted;
    for (const Transfer& t : transfers)
      posted.push_back(
          post(t.kind, t.peer, t.buffer, t.bytes, static_cast<std::uint32_t>(tag), {}));
    for (const RequestPtr& r : posted) wait(r);
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
  // "auto: recursive_doubling up to 16 KiB, halving_doubling up to 1 MiB, ring above"
  auto size_text = [](std::size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
           : bytes >= 1024     ? std::to_string(bytes >> 10) + " KiB"
                               : std::to_string(bytes) + " B";
  };
  std::string text;
  std::string current = impl_->predict("auto", 8).algorithm;
  for (std::size_t bytes = 16; bytes <= (std::size_t{1} << 30); bytes *= 2) {
    std::string next = impl_->predict("auto", bytes).algorithm;
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
  Transport* t = impl_->route_[static_cast<std::size_t>(peer)];
  return t == nullptr ? "self" : std::string(t->name());
}

std::vector<std::string> Communicator::allreduce_algorithms() {
  return AlgorithmRegistry::instance().names(Collective::allreduce);
}

void Communicator::set_algorithm(const std::string& name) {
  check_algorithm(name, rank());
  impl_->set_algorithm(name);
}

AllreducePrediction Communicator::predict_allreduce(std::size_t bytes,
                                                    const std::string& algorithm) const {
  if (algorithm != "auto" && !AlgorithmRegistry::instance().find(algorithm, Collective::allreduce))
    check_algorithm(algorithm, rank());  // names the known ones
  const Plan plan = impl_->predict(algorithm, bytes);
  return {plan.algorithm, plan.chunk_bytes, plan.seconds};
}

void Communicator::set_wire(DataType wire) {
  impl_->set_wire(wire);
}

void Communicator::set_tuning(const Tuning& tuning) {
  impl_->set_tuning(tuning);
}

void Communicator::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0)
    throw InvalidArgument("set_timeout", "the timeout must be positive", rank());
  impl_->options_.timeout = timeout;
}

void Communicator::abort(const std::string& reason) {
  impl_->abort(reason);
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op) {
  impl_->check_buffer("allreduce", send, count, type);
  impl_->check_buffer("allreduce", recv, count, type);
  impl_->check_overlap("allreduce", send, count, recv, count, type, 0);
  impl_->run(Collective::allreduce, {send, recv, count, type, op, 0});
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                  DataType type, ReduceOp op) {
  const auto blocks = static_cast<std::size_t>(size());
  impl_->check_buffer("reduce_scatter", send, recv_count, type, blocks);
  impl_->check_buffer("reduce_scatter", recv, recv_count, type);
  impl_->check_overlap("reduce_scatter", send, recv_count * blocks, recv, recv_count, type,
                       -static_cast<std::ptrdiff_t>(recv_count) * rank());
  impl_->run(Collective::reduce_scatter, {send, recv, recv_count, type, op, 0});
}

void Communicator::allgather(const void* send, void* recv, std::size_t send_count, DataType type) {
  const auto blocks = static_cast<std::size_t>(size());
  impl_->check_buffer("allgather", send, send_count, type);
  impl_->check_buffer("allgather", recv, send_count, type, blocks);
  impl_->check_overlap("allgather", send, send_count, recv, send_count * blocks, type,
                       static_cast<std::ptrdiff_t>(send_count) * rank());
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
  impl_->point_to_point("send", {{Request::Kind::send, const_cast<void*>(buffer), bytes, peer}},
                        tag);
}

void Communicator::recv(void* buffer, std::size_t bytes, int peer, int tag) {
  impl_->point_to_point("recv", {{Request::Kind::recv, buffer, bytes, peer}}, tag);
}

void Communicator::sendrecv(const void* send_buffer, std::size_t send_bytes, int destination,
                            void* recv_buffer, std::size_t recv_bytes, int source, int tag) {
  impl_->point_to_point(
      "sendrecv",
      {{Request::Kind::send, const_cast<void*>(send_buffer), send_bytes, destination},
       {Request::Kind::recv, recv_buffer, recv_bytes, source}},
      tag);
}

}  // namespace arcoll
