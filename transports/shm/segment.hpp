// The shared-memory segments of the shm transport. Each rank owns one POSIX segment holding
// a doorbell and one byte ring per peer (the peer writes, the owner reads), and maps every
// peer's. Setting them up: create ours, announce it through the store, map the peers', probe
// whether cross-memory attach may read their memory, and unlink the names once every rank has
// mapped every segment, so that a crash leaves nothing in /dev/shm. What travels in the rings
// is the transport's business (shm_transport.cpp). A segment whose owner died before its name
// went (killed, or ended by an exception nobody caught, which runs no destructor) is removed by
// the survivors that see it die during setup, or by the next job's start on the host.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "src/base/socket.hpp"
#include "transports/transport.hpp"

namespace arcoll::shm {

// Room for two of the algorithms' default pipeline chunks (512 KiB) with their fragments'
// headers: the sender copies one in while the receiver takes the other out. At 512 KiB a chunk
// did not fit, and a 2-rank all-reduce of 2 MiB took 1.5 times as long; at 1 MiB, a chunk and
// most of the next, 5-15 % longer at 2 and 8 MiB.
inline constexpr std::size_t kRingBytes = (1024 + 64) * 1024;
inline constexpr std::size_t kBoardBytes = 64 * 1024;

// A large message read across, copied by both its ranks: the receiver (the ring's owner)
// reads chunks from the front, and the sender, idle until it is acknowledged, writes chunks
// from the back (shared_copy.cpp). Each claims a chunk before copying it.
struct alignas(64) SharedCopy {
  // The message's send id (low 16 bits), chunks claimed from the front and from the back (24
  // bits each): a claim is one compare-exchange, which fails for a message the receiver left.
  std::atomic<std::uint64_t> claims;
  // Chunks the sender has written; kFailed once a write of its failed.
  std::atomic<std::uint64_t> written;
  std::atomic<std::uint64_t> destination;  // the receive buffer, in the receiver's memory
  std::atomic<std::uint64_t> bytes;
  static constexpr std::uint64_t kFailed = std::uint64_t{1} << 63;
};

struct alignas(64) Ring {
  std::atomic<std::uint64_t> head;  // consumed bytes, written by the owner (reader)
  char pad0[56];
  std::atomic<std::uint32_t> writer_waiting;  // the writer sleeps until space frees
  char pad1[60];
  SharedCopy shared_copy;
  char data[kRingBytes];
};

// The process that owns a segment: its pid, when it started (clock ticks after boot) and its
// pid namespace (an inode): together they tell a live owner from a pid reused since.
struct SegmentOwner {
  std::int32_t pid = 0;
  std::uint32_t unused = 0;
  std::uint64_t start = 0;
  std::uint64_t pid_namespace = 0;
};
SegmentOwner this_process();
// Whether `owner` has ended: false where it cannot be told (another pid namespace, a container
// sharing /dev/shm; no pid yet).
bool has_ended(const SegmentOwner& owner);
// Unlinks the segments in /dev/shm whose owner has ended, and those that never got an owner
// and are older than `unowned_age`; returns how many.
int remove_abandoned_segments(std::chrono::seconds unowned_age = std::chrono::minutes(10));

struct SegmentHeader {
  std::atomic<std::uint32_t> doorbell;
  std::atomic<std::uint32_t> sleeping;
  SegmentOwner owner;
  // 1: the owner, once it has said it sleeps, runs a barrier on every process that joined
  // (remote_barrier) before its last look; its writers that joined need no fence of their own.
  // Set before the segment is announced.
  std::atomic<std::uint32_t> barriers_before_sleep;
  char pad[28];
  // The collective from which the owner failed (0: none), written once when it aborts: peers
  // read it at the end of every call, so it has a line of its own that nothing else writes.
  alignas(64) std::atomic<std::uint64_t> failed_call;
  char pad1[56];
};
static_assert(sizeof(SegmentHeader) == 128);

// The doorbell rings only for an owner that said it sleeps: the writer looks at that word
// after its entry, and the owner at the ring after saying so, each behind a fence, so that one
// of them sees the other. The writer's fence stalls every message on its stores; the owner's
// runs once per sleep. With membarrier(2) the owner pays for both: its global expedited
// barrier makes every running thread of the processes that joined execute a full barrier
// (a thread not running has passed one when it was switched out), which stands in for the
// writers' fences. Joining: registering this process for those barriers; false where the
// kernel lacks the commands or this process may not use them (seccomp).
bool join_remote_barriers();
// The barrier on every process that joined; false where it failed.
bool remote_barrier();

// The ring `writer` writes into, in a segment.
Ring* ring_of(void* segment, int writer);
SegmentHeader* header_of(void* segment);
// The board of the segment's owner, after the rings of a job of `size` ranks.
std::byte* board_in(void* segment, int size);

// A mapping of a segment, unmapped when it goes.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, std::size_t bytes) : base_(base), bytes_(bytes) {}
  Mapping(Mapping&& other) noexcept;
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  void* get() const { return base_; }

 private:
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// A peer's segment as mapped here, and the process behind it.
struct PeerSegment {
  Mapping segment;  // our ring to the peer is at our rank
  int pid = 0;
  net::Fd pidfd;  // readable once the peer's process has ended
};

class Segments {
 public:
  // Sets up the segments of `setup.peers` (nothing for none). `single_copy`: large messages
  // are to be read by their receivers from the senders' memory; cma() says whether they may
  // be, which is when every rank of the host may read every other (each probes its peers with
  // cross-memory attach). Throws SystemError, TimeoutError or ProtocolError naming the peer.
  Segments(const TransportSetup& setup, bool single_copy);

  void* own() const { return own_.get(); }
  PeerSegment& peer(int rank) { return peers_[static_cast<std::size_t>(rank)]; }
  const PeerSegment& peer(int rank) const { return peers_[static_cast<std::size_t>(rank)]; }
  bool cma() const { return cma_; }
  // Whether every rank of the host may read every other and was asked to send large messages
  // to be read (single_copy): the same on every rank, unlike cma().
  bool every_rank_reads() const { return every_rank_reads_; }

 private:
  void set_up(const TransportSetup& setup);

  Mapping own_;
  std::vector<PeerSegment> peers_;  // by rank
  bool cma_;
  bool every_rank_reads_ = false;
};

}  // namespace arcoll::shm
