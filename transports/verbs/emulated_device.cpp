// An emulated RDMA device (ARCOLL_VERBS_DEVICE=emulated): what an HCA does for the verbs
// transport, between the processes of one host, so that the protocol runs and is tested where
// no RDMA hardware is. Each rank's device state lies in memory of its own (a memfd, mapped by
// its peers through pidfd_getfd: nothing named is left behind): its memory keys, and per peer
// a receive queue (the receives it posted for that peer, taken by the peer) and a completion
// queue (what the peer delivered). A send or an RDMA write is done by the sender itself: it
// checks the receiver's key and bounds as the receiver's HCA would, moves the bytes with a
// cross-memory write, takes the receiver's posted receive and delivers its completion, and
// completes locally. Failures come as an HCA's do: error completions (a wrong or stale key, a
// message longer than the receive, a peer that stopped answering), the queue pair going to
// error and flushing what was posted, a dead peer's receives flushed. Completions of different
// peers come in an order that changes from poll to poll, as across queue pairs.
//
// ARCOLL_VERBS_FAULT=<kind>:<n> makes this rank's n-th send or write fail as `kind` says:
// retry (the peer stopped answering), access (the peer refused the key).
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/env.hpp"
#include "transports/verbs/device.hpp"

namespace arcoll::verbs {
namespace {

constexpr std::size_t kKeys = 4096;
constexpr std::size_t kReceiveSlots = 1024;     // posted receives per peer
constexpr std::size_t kCompletionSlots = 2048;  // completions from one peer not yet polled
constexpr auto kDoorbellSlice = std::chrono::milliseconds(5);
// How long a send to a peer with no receive posted is retried, as an HCA's RNR retries do.
constexpr auto kReceiverNotReadyRetries = std::chrono::milliseconds(100);

struct KeyEntry {
  std::atomic<std::uint32_t> state;  // generation << 1 | valid
  std::uint32_t unused;
  std::uint64_t address;
  std::uint64_t bytes;
};
struct PostedReceive {
  std::uint64_t wr_id;
  std::uint64_t address;
  std::uint32_t bytes;
  std::uint32_t lkey;
};
struct DeliveredCompletion {
  std::uint64_t wr_id;
  std::uint32_t bytes;
  std::uint32_t imm;
  std::uint8_t opcode;
  std::uint8_t status;
  std::uint8_t pad[6];
};
// Slots between two processes: one side appends (tail), the other takes (head), each index on
// a cache line of its own.
template <class Slot, std::size_t kSlots>
struct alignas(64) SlotQueue {
  std::atomic<std::uint64_t> tail;
  char pad0[56];
  std::atomic<std::uint64_t> head;
  char pad1[56];
  Slot slots[kSlots];
};
using ReceiveQueue = SlotQueue<PostedReceive, kReceiveSlots>;  // the owner posts, the peer takes
using CompletionQueue = SlotQueue<DeliveredCompletion, kCompletionSlots>;  // the peer delivers,
                                                                          // the owner polls
struct alignas(64) StateHeader {
  std::atomic<std::uint32_t> doorbell;
  std::atomic<std::uint32_t> sleeping;
};

std::size_t state_bytes(int size) {
  return sizeof(StateHeader) + kKeys * sizeof(KeyEntry) +
         static_cast<std::size_t>(size) * (sizeof(ReceiveQueue) + sizeof(CompletionQueue));
}

// A rank's device state, as laid out in its memory.
struct State {
  StateHeader* header;
  KeyEntry* keys;
  ReceiveQueue* receives;       // by peer
  CompletionQueue* completions;  // by peer

  State(void* base, int size) {
    auto* at = static_cast<char*>(base);
    header = reinterpret_cast<StateHeader*>(at);
    keys = reinterpret_cast<KeyEntry*>(at + sizeof(StateHeader));
    receives = reinterpret_cast<ReceiveQueue*>(at + sizeof(StateHeader) + kKeys * sizeof(KeyEntry));
    completions = reinterpret_cast<CompletionQueue*>(receives + size);
  }
};

std::uint32_t key_of(std::size_t index, std::uint32_t generation) {
  return static_cast<std::uint32_t>(index) << 8 | (generation & 0xffu);
}

// Whether `key` is valid in `keys` for [address, address + bytes).
bool key_covers(const KeyEntry* keys, std::uint32_t key, std::uint64_t address,
                std::uint64_t bytes) {
  const std::size_t index = key >> 8;
  if (index >= kKeys) return false;
  const KeyEntry& entry = keys[index];
  const std::uint32_t state = entry.state.load(std::memory_order_acquire);
  if ((state & 1u) == 0 || ((state >> 1) & 0xffu) != (key & 0xffu)) return false;
  return address >= entry.address && bytes <= entry.bytes &&
         address - entry.address <= entry.bytes - bytes;
}

void ring(StateHeader* header) {
  header->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (header->sleeping.load(std::memory_order_seq_cst) != 0)
    ::syscall(SYS_futex, &header->doorbell, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

class EmulatedDevice final : public Device {
 public:
  explicit EmulatedDevice(const DeviceSetup& setup)
      : rank_(setup.rank), size_(setup.size), bytes_(state_bytes(setup.size)) {
    memfd_.reset(::memfd_create("arcoll-verbs-emulated", MFD_CLOEXEC));
    if (!memfd_ || ::ftruncate(memfd_.get(), static_cast<off_t>(bytes_)) != 0)
      throw SystemError("verbs setup", std::string("emulated device memory: ") +
                                           std::strerror(errno), rank_);
    own_base_ = map(memfd_.get());
    peers_.resize(static_cast<std::size_t>(size_));
    if (auto fault = env::get("ARCOLL_VERBS_FAULT")) parse_fault(*fault);
  }

  ~EmulatedDevice() override {
    for (Peer& p : peers_)
      if (p.base != nullptr) ::munmap(p.base, bytes_);
    if (own_base_ != nullptr) ::munmap(own_base_, bytes_);
  }

  std::string describe() const override { return "emulated"; }

  MemoryKey register_memory(void* address, std::size_t bytes) override {
    std::lock_guard lock(keys_mutex_);
    State own(own_base_, size_);
    for (std::size_t probe = 0; probe < kKeys; ++probe) {
      const std::size_t index = (next_key_ + probe) % kKeys;
      KeyEntry& entry = own.keys[index];
      const std::uint32_t state = entry.state.load(std::memory_order_relaxed);
      if (state & 1u) continue;
      const std::uint32_t generation = (state >> 1) + 1;
      entry.address = reinterpret_cast<std::uint64_t>(address);
      entry.bytes = bytes;
      entry.state.store(generation << 1 | 1u, std::memory_order_release);
      next_key_ = index + 1;
      const std::uint32_t key = key_of(index, generation);
      return {key, key, index};
    }
    throw SystemError("verbs", "the emulated device has no free memory key (" +
                                   std::to_string(kKeys) + " registered)", rank_);
  }

  void deregister_memory(const MemoryKey& key) override {
    std::lock_guard lock(keys_mutex_);
    KeyEntry& entry = State(own_base_, size_).keys[key.handle];
    const std::uint32_t state = entry.state.load(std::memory_order_relaxed);
    entry.state.store(state & ~1u, std::memory_order_release);  // the generation stays
  }

  std::string local_address(int /*peer*/) const override {
    return std::to_string(::getpid()) + " " + std::to_string(memfd_.get());
  }

  void connect(int peer, const std::string& remote) override {
    int pid = 0, fd = -1;
    if (std::sscanf(remote.c_str(), "%d %d", &pid, &fd) != 2)
      throw ProtocolError("verbs setup", "malformed emulated address '" + remote + "'", rank_,
                          peer);
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    p.pid = pid;
    p.pidfd.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!p.pidfd)
      throw PeerError("verbs setup", "rank " + std::to_string(peer) + " is gone", rank_, peer);
    net::Fd theirs(static_cast<int>(::syscall(SYS_pidfd_getfd, p.pidfd.get(), fd, 0)));
    if (!theirs)
      throw SystemError("verbs setup",
                        "cannot reach rank " + std::to_string(peer) +
                            "'s emulated device (" + std::strerror(errno) +
                            "): it needs cross-memory access between the ranks (root, or "
                            "ptrace permission)",
                        rank_, peer);
    p.base = map(theirs.get());
    p.connected = true;
  }

  void post_receive(int peer, std::uint64_t wr_id, const Segment& into) override {
    State own(own_base_, size_);
    if (!key_covers(own.keys, into.lkey, reinterpret_cast<std::uint64_t>(into.address),
                    into.bytes))
      throw InvalidArgument("verbs", "receive posted with a key that does not cover it", rank_,
                            peer);
    ReceiveQueue& queue = own.receives[peer];
    const std::uint64_t tail = queue.tail.load(std::memory_order_relaxed);
    if (tail - queue.head.load(std::memory_order_acquire) >= kReceiveSlots)
      throw InternalError("verbs", "more receives posted than the queue holds");
    queue.slots[tail % kReceiveSlots] = {wr_id, reinterpret_cast<std::uint64_t>(into.address),
                                         into.bytes, into.lkey};
    queue.tail.store(tail + 1, std::memory_order_release);
  }

  void post_send(int peer, std::uint64_t wr_id, const Segment& from) override {
    submit({wr_id, from, Opcode::send, 0, 0, 0, {}}, peer);
  }

  void post_write_with_imm(int peer, std::uint64_t wr_id, const Segment& from,
                           std::uint64_t remote_address, std::uint32_t rkey,
                           std::uint32_t imm) override {
    submit({wr_id, from, Opcode::write_with_imm, remote_address, rkey, imm, {}}, peer);
  }

  std::size_t poll(std::span<Completion> out) override {
    retry_waiting();
    std::size_t n = 0;
    while (n < out.size() && !local_.empty()) {
      out[n++] = local_.front();
      local_.pop_front();
    }
    State own(own_base_, size_);
    // Peers in a turning order: completions of different queue pairs come interleaved.
    const int start = turn_++ % std::max(size_, 1);
    for (int k = 0; k < size_ && n < out.size(); ++k) {
      const int peer = (start + k) % size_;
      Peer& p = peers_[static_cast<std::size_t>(peer)];
      if (!p.connected) continue;
      // Whether it had ended is looked at before what it delivered is read: a completion it
      // wrote just before ending is read before its receives are flushed, never after.
      const bool ended = !p.flushed && has_ended(p);
      CompletionQueue& queue = own.completions[peer];
      std::uint64_t head = queue.head.load(std::memory_order_relaxed);
      const std::uint64_t tail = queue.tail.load(std::memory_order_acquire);
      for (; head < tail && n < out.size(); ++head) {
        const DeliveredCompletion& d = queue.slots[head % kCompletionSlots];
        out[n++] = {d.wr_id, peer, static_cast<Opcode>(d.opcode), static_cast<Status>(d.status),
                    d.bytes, d.imm};
      }
      queue.head.store(head, std::memory_order_release);
      if (ended && head == tail && n < out.size()) n += flush_receives(peer, out.subspan(n));
    }
    return n;
  }

  void wait(Clock::time_point until) override {
    StateHeader* header = State(own_base_, size_).header;
    const std::uint32_t seen = header->doorbell.load(std::memory_order_seq_cst);
    header->sleeping.store(1, std::memory_order_seq_cst);
    if (!pending() && !woken_.exchange(false)) {
      const auto left = std::min<Clock::duration>(until - Clock::now(), kDoorbellSlice);
      if (left > Clock::duration::zero()) {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
        timespec timeout{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
        ::syscall(SYS_futex, &header->doorbell, FUTEX_WAIT, seen, &timeout, nullptr, 0);
      }
    }
    header->sleeping.store(0, std::memory_order_seq_cst);
  }

  void wake() noexcept override {
    woken_.store(true);
    ring(State(own_base_, size_).header);
  }

 private:
  // A send or write to run, and, while the peer has no receive posted, until when an HCA
  // would keep retrying (receiver not ready) before it fails it.
  struct Work {
    std::uint64_t wr_id;
    Segment from;
    Opcode opcode;
    std::uint64_t remote_address;
    std::uint32_t rkey;
    std::uint32_t imm;
    Clock::time_point retry_until;
  };
  struct Peer {
    int pid = 0;
    net::Fd pidfd;
    void* base = nullptr;
    bool connected = false;
    bool failed = false;   // our queue pair to it went to error
    bool flushed = false;  // its death flushed our receives
    std::deque<Work> waiting;  // for a receive to be posted, in order
  };

  void submit(Work work, int peer) {
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    work.retry_until = Clock::now() + kReceiverNotReadyRetries;
    p.waiting.push_back(work);
    run_waiting(peer);
  }

  // Work in order, as long as the peer has receives posted (or it failed, or retried too long).
  void run_waiting(int peer) {
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    while (!p.waiting.empty()) {
      const Work& w = p.waiting.front();
      if (!deliver(peer, w)) return;
      p.waiting.pop_front();
    }
  }

  void retry_waiting() {
    for (int peer = 0; peer < size_; ++peer)
      if (!peers_[static_cast<std::size_t>(peer)].waiting.empty()) run_waiting(peer);
  }

  void* map(int fd) const {
    void* base = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
      throw SystemError("verbs setup", std::string("mmap: ") + std::strerror(errno), rank_);
    return base;
  }

  bool has_ended(const Peer& p) const {
    pollfd readable{p.pidfd.get(), POLLIN, 0};
    return p.pidfd && ::poll(&readable, 1, 0) > 0;
  }

  bool pending() {
    if (!local_.empty()) return true;
    for (const Peer& p : peers_)
      if (!p.waiting.empty()) return true;  // retried at the next poll
    State own(own_base_, size_);
    for (int peer = 0; peer < size_; ++peer) {
      const Peer& p = peers_[static_cast<std::size_t>(peer)];
      if (!p.connected) continue;
      const CompletionQueue& queue = own.completions[peer];
      if (queue.tail.load(std::memory_order_acquire) != queue.head.load(std::memory_order_relaxed))
        return true;
      if (!p.flushed && has_ended(p)) return true;
    }
    return false;
  }

  // A dead peer takes nothing more: our receives posted for it end flushed, as a queue pair
  // in error ends them.
  std::size_t flush_receives(int peer, std::span<Completion> out) {
    ReceiveQueue& queue = State(own_base_, size_).receives[peer];
    std::uint64_t head = queue.head.load(std::memory_order_acquire);
    const std::uint64_t tail = queue.tail.load(std::memory_order_relaxed);
    std::size_t n = 0;
    for (; head < tail && n < out.size(); ++head)
      out[n++] = {queue.slots[head % kReceiveSlots].wr_id, peer, Opcode::receive, Status::flushed,
                  0, 0};
    queue.head.store(head, std::memory_order_release);
    if (head == tail) peers_[static_cast<std::size_t>(peer)].flushed = true;
    return n;
  }

  void parse_fault(const std::string& text) {
    const auto colon = text.find(':');
    const std::string kind = text.substr(0, colon);
    fault_at_ = colon == std::string::npos ? 0 : std::strtoull(text.c_str() + colon + 1, nullptr, 10);
    if (kind == "retry")
      fault_ = Status::retry_exceeded;
    else if (kind == "access")
      fault_ = Status::remote_access;
    if (fault_at_ == 0 || fault_ == Status::ok)
      throw ConfigurationError("environment",
                               "ARCOLL_VERBS_FAULT='" + text + "' must be retry:<n> or access:<n>",
                               rank_);
  }

  void complete_locally(std::uint64_t wr_id, int peer, Opcode opcode, Status status) {
    local_.push_back({wr_id, peer, opcode, status, 0, 0});
    // After an error the queue pair is in error: what follows is flushed.
    if (status != Status::ok) peers_[static_cast<std::size_t>(peer)].failed = true;
  }

  // A send or an RDMA write with immediate, done here as the two HCAs would do it between them;
  // false while the peer has no receive posted for it (retried at the next poll).
  bool deliver(int peer, const Work& w) {
    const std::uint64_t wr_id = w.wr_id;
    const Segment& from = w.from;
    const Opcode opcode = w.opcode;
    const std::uint64_t remote_address = w.remote_address;
    const std::uint32_t rkey = w.rkey, imm = w.imm;
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    State own(own_base_, size_);
    if (p.failed) return complete_locally(wr_id, peer, opcode, Status::flushed), true;
    State theirs(p.base, size_);
    // The receive it lands in (a write with immediate takes one too, for its completion).
    ReceiveQueue& queue = theirs.receives[rank_];
    const std::uint64_t head = queue.head.load(std::memory_order_relaxed);
    if (head == queue.tail.load(std::memory_order_acquire) && !has_ended(p)) {
      if (Clock::now() < w.retry_until) return false;  // receiver not ready: retried
      return complete_locally(wr_id, peer, opcode, Status::retry_exceeded), true;
    }
    if (fault_ != Status::ok && ++operations_ == fault_at_)
      return complete_locally(wr_id, peer, opcode, fault_), true;
    if (!key_covers(own.keys, from.lkey, reinterpret_cast<std::uint64_t>(from.address),
                    from.bytes) &&
        from.bytes != 0)
      return complete_locally(wr_id, peer, opcode, Status::local_error), true;
    if (has_ended(p)) return complete_locally(wr_id, peer, opcode, Status::retry_exceeded), true;
    if (opcode == Opcode::write_with_imm &&
        !key_covers(theirs.keys, rkey, remote_address, from.bytes))
      return complete_locally(wr_id, peer, opcode, Status::remote_access), true;
    const PostedReceive receive = queue.slots[head % kReceiveSlots];
    CompletionQueue& completions = theirs.completions[rank_];
    auto deliver_completion = [&](Opcode kind, Status status, std::uint32_t bytes) {
      const std::uint64_t tail = completions.tail.load(std::memory_order_relaxed);
      completions.slots[tail % kCompletionSlots] = {
          receive.wr_id, bytes, imm, static_cast<std::uint8_t>(kind),
          static_cast<std::uint8_t>(status), {}};
      completions.tail.store(tail + 1, std::memory_order_release);
      queue.head.store(head + 1, std::memory_order_release);
      ring(theirs.header);
    };
    if (opcode == Opcode::send && from.bytes > receive.bytes) {
      deliver_completion(Opcode::receive, Status::local_error, 0);
      return complete_locally(wr_id, peer, opcode, Status::remote_invalid), true;
    }
    const std::uint64_t target = opcode == Opcode::send ? receive.address : remote_address;
    if (from.bytes != 0 && !write_to(p, from, target))
      return complete_locally(wr_id, peer, opcode, Status::retry_exceeded), true;
    deliver_completion(opcode == Opcode::send ? Opcode::receive : Opcode::receive_with_imm,
                       Status::ok, from.bytes);
    complete_locally(wr_id, peer, opcode, Status::ok);
    return true;
  }

  // The bytes into the peer's memory; false when the peer is gone.
  bool write_to(const Peer& p, const Segment& from, std::uint64_t target) {
    std::size_t done = 0;
    while (done < from.bytes) {
      iovec local{const_cast<char*>(static_cast<const char*>(from.address)) + done,
                  from.bytes - done};
      iovec remote{reinterpret_cast<void*>(target + done), from.bytes - done};
      const ssize_t n = ::process_vm_writev(p.pid, &local, 1, &remote, 1, 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        return false;
      }
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  int rank_;
  int size_;
  std::size_t bytes_;
  net::Fd memfd_;
  void* own_base_ = nullptr;
  std::vector<Peer> peers_;
  std::deque<Completion> local_;
  std::mutex keys_mutex_;  // deregistration may come from mem_free in another thread
  std::size_t next_key_ = 0;
  unsigned turn_ = 0;
  std::atomic<bool> woken_{false};
  Status fault_ = Status::ok;
  std::uint64_t fault_at_ = 0;
  std::uint64_t operations_ = 0;
};

}  // namespace

std::unique_ptr<Device> open_emulated_device(const DeviceSetup& setup) {
  return std::make_unique<EmulatedDevice>(setup);
}

}  // namespace arcoll::verbs
