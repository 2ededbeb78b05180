// A large message read across processes, copied by both its ranks (SharedCopy, segment.hpp;
// its chunks: shared_copy.hpp).
// Its sender has nothing to do until the receiver acknowledges it, and one core's kernel copy
// is the whole transfer: so the receiver offers the sender a share (a copy_offer entry) and
// reads chunks from the front while the sender, once it sees the offer, writes chunks from the
// back into the receive buffer (process_vm_writev). Each claims a chunk before copying it, so a
// sender that is busy elsewhere (an isend whose caller computes) takes none and holds nothing
// up. 2 processes of an Intel Xeon, a buffer read again and again, one copy against two:
// 512 KiB 30 -> 24 us, 2 MiB 200 -> 97 us; rewritten by the sender before each: 76 -> 48 and
// 348 -> 295 us.
#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>

#include "src/base/log.hpp"
#include "transports/shm/shm_transport.hpp"

namespace arcoll::shm {
namespace {

// Chunk counts take 8 bits each; the send id takes the other 48, so that an offer seen late
// never matches a later message of the same size.
constexpr std::uint64_t kCountBits = 8;
constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kCountBits) - 1;
static_assert(kMaxSharedCopyChunks <= kCountMask, "a message's chunks must fit in a count");
constexpr std::uint64_t kIdShift = 2 * kCountBits;

std::uint64_t id_of(std::uint64_t send_id) {
  return send_id & ((std::uint64_t{1} << (64 - kIdShift)) - 1);
}
std::uint64_t front_of(std::uint64_t claims) {
  return (claims >> kCountBits) & kCountMask;
}
std::uint64_t back_of(std::uint64_t claims) {
  return claims & kCountMask;
}

// Copies `n` bytes between this process at `local` and `pid`'s memory at `remote`, in as many
// calls as the kernel needs: 0, or the errno of the call that failed.
template <class Call>
int copy_across(Call call, int pid, char* local, std::uint64_t remote, std::uint64_t n) {
  for (std::uint64_t done = 0; done < n;) {
    iovec here{local + done, n - done};
    iovec there{reinterpret_cast<void*>(remote + done), n - done};
    const ssize_t moved = call(pid, &here, 1, &there, 1, 0);
    if (moved <= 0) return moved < 0 ? errno : EFAULT;
    done += static_cast<std::uint64_t>(moved);
  }
  return 0;
}

// Ends a sender that claimed a chunk of this rank's buffer and did not count it written
// within the timeout: it may not have written it yet (stopped or stalled between its claim and
// its copy), and would then write it once it ran again, into a buffer that the failed call has
// given back to its caller. Only through its pidfd, which names that process and no later one
// with its pid. Empty once it has ended; else why not.
std::string end_unfinished_writer(int pidfd) {
  if (pidfd < 0) return "no pidfd of it to signal";
  if (::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0) != 0 && errno != ESRCH)
    return std::strerror(errno);
  // A killed process ends once its copy in the kernel returns: a chunk's time.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(1);
  pollfd ended{pidfd, POLLIN, 0};
  while (::poll(&ended, 1, 100) <= 0)
    if (Clock::now() > deadline) return "it did not end within a second";
  return {};
}

}  // namespace

std::size_t ShmTransport::shared_copy_from(Request::Receivers receivers) const {
  // A gather's messages of 64-128 KiB in halves where every rank has a core: their senders
  // have nothing left to do but wait, and the half a sender writes is off the path of the
  // root, which reads every message of the call. 2 ranks of an Intel Xeon, gather of 64 KiB a
  // rank, read by the root alone -> in halves, seven series of 6-10 interleaved runs: -1% to
  // -18% out of place, -2% to -20% in place (the build against itself: -3% / -1%). A
  // scatter's root, with its own block to copy, was +8% to +18% out of place; 4 ranks of 2
  // cores, gather +15% / +24%; halves from 32 KiB, gather of 32 KiB a rank -6% / +5%.
  return receivers == Request::Receivers::gathered && !oversubscribed_ ? kSharedHalvesBytes
                                                                       : kSharedCopyBytes;
}

bool ShmTransport::shares_copy(int peer, const ShmMessage& m) const {
  // On a host with more ranks than cores, only where every sender of the call only sends
  // (gather; broadcast on 2 ranks): there a waiting sender's share goes on a core nobody
  // needs. Elsewhere the offers and the reads in pieces cost more than the shares bring (4
  // ranks on 2 cores, medians of 8 interleaved runs, with offers -> without: scatter of 512
  // KiB 36.6 -> 25.7 us, gather of 2 MiB 178 -> 238 us).
  const Request::Receivers receivers = m.request->receivers;
  if (oversubscribed_ && receivers != Request::Receivers::gathered &&
      receivers != Request::Receivers::kept_by_one)
    return false;
  const std::size_t from = shared_copy_from(receivers);
  // A peer that awaits our acknowledgement is reading a message of ours: busy, it would only
  // see the offer once this one is read (send/recv both ways, 5 interleaved runs with the
  // offer against none: 512 KiB +24% out of place, 256 KiB +8%).
  return m.bytes >= from && peers_[static_cast<std::size_t>(peer)].awaiting_ack.empty();
}

bool ShmTransport::read_across(int peer, char* into, std::uint64_t from, std::uint64_t n) {
  const int error = copy_across(::process_vm_readv, segments_.peer(peer).pid, into, from, n);
  if (error == 0) return true;
  const std::string why =
      "its buffer could not be read (" + std::string(std::strerror(error)) + ")";
  // Only a process that is gone makes the read fail with ESRCH; a refusal is not a death.
  // A peer that gave up may have freed the buffer its descriptor named: its reason, behind the
  // descriptor in the ring, is the news.
  if (error == ESRCH)
    fail_dead_peer(peer, why);
  else if (!fail_with_last_word(peer))
    fail_peer(peer, ErrorCode::system, "rank " + std::to_string(peer) + ": " + why);
  return false;
}

bool ShmTransport::read_with_sender(int peer, const ShmMessage& m, char* into) {
  SharedCopy& s = ring_of(own(), peer)->shared_copy;
  const std::uint64_t chunks = shared_copy_chunks(m.bytes);
  // Until the sender has written the `theirs` chunks it claimed: a copy of one chunk at most,
  // or it has died. False where it failed a write, died or took longer than the timeout,
  // reported where `report`.
  auto await_theirs = [&](std::uint64_t theirs, bool report) {
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (unsigned spins = 1;; ++spins) {
      const std::uint64_t written = s.written.load(std::memory_order_acquire);
      if (written & SharedCopy::kFailed) {
        if (report)
          fail_peer(peer, ErrorCode::system,
                    "rank " + std::to_string(peer) +
                        " could not write its share of a message into this rank's buffer");
        return false;
      }
      if (written == theirs) return true;
      if (spins % 1024 != 0) continue;
      if (polling_.yields) std::this_thread::yield();
      pollfd ended{segments_.peer(peer).pidfd.get(), POLLIN, 0};
      if (segments_.peer(peer).pidfd && ::poll(&ended, 1, 0) > 0) {
        if (report) fail_dead_peer(peer, "it ended while copying its share of a message");
        return false;
      }
      if (Clock::now() > deadline) {
        const std::string not_ended = end_unfinished_writer(segments_.peer(peer).pidfd.get());
        const std::string what =
            "rank " + std::to_string(peer) +
            " did not report its share of a message written within the timeout: " +
            (not_ended.empty() ? "it was ended, as it might still write into this rank's buffer"
                               : "it could not be ended (" + not_ended +
                                     ") and might still write into this rank's buffer");
        if (report)
          fail_peer(peer, ErrorCode::timeout, what);
        else
          log::warn(what);
        return false;
      }
    }
  };
  s.written.store(0, std::memory_order_relaxed);
  s.destination.store(reinterpret_cast<std::uint64_t>(into), std::memory_order_relaxed);
  s.bytes.store(m.bytes, std::memory_order_relaxed);
  // The first half is this rank's before the offer: it always reads a part, so that a read it
  // may not make fails the call whatever the sender does. Then half of what is left while the
  // sender has taken nothing (it may be busy: a read costs a call), one chunk at a time once
  // it copies too.
  std::uint64_t claims = id_of(m.send_id) << kIdShift;
  std::uint64_t take = (chunks + 1) / 2;
  s.claims.store(claims + (take << kCountBits), std::memory_order_release);
  enqueue(peer, Outgoing(control_entry(EntryKind::copy_offer, m.send_id)));
  for (;;) {
    const std::uint64_t at = front_of(claims) * shared_copy_chunk_bytes(m.bytes);
    if (!read_across(
            peer, into + at, m.address + at,
            std::min<std::uint64_t>(take * shared_copy_chunk_bytes(m.bytes), m.bytes - at))) {
      // Nothing more for the sender to take, and what it took is waited for (or the sender
      // ended): the buffer is the caller's again after the error.
      std::uint64_t closed;
      do {
        closed = claims + ((chunks - front_of(claims) - back_of(claims)) << kCountBits);
      } while (!s.claims.compare_exchange_weak(claims, closed));
      await_theirs(back_of(closed), false);
      return false;
    }
    claims = s.claims.load(std::memory_order_acquire);
    std::uint64_t left;
    do {
      left = chunks - front_of(claims) - back_of(claims);
      take = back_of(claims) == 0 ? (left + 1) / 2 : 1;
    } while (left != 0 && !s.claims.compare_exchange_weak(claims, claims + (take << kCountBits),
                                                          std::memory_order_acq_rel));
    if (left == 0) break;
  }
  const std::uint64_t theirs = back_of(claims);
  if (!await_theirs(theirs, true)) return false;
  ++forwarded_.shared;
  forwarded_.chunks_by_senders += theirs;
  forwarded_.chunks_read += chunks - theirs;
  return true;
}

void ShmTransport::help_receiver(int peer, std::uint64_t send_id) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  const auto it = p.awaiting_ack.find(send_id);
  if (it == p.awaiting_ack.end()) {
    fail_peer(peer, ErrorCode::protocol, "an offer to share the copy of an unknown send");
    return;
  }
  const Request& send = *it->second;
  SharedCopy& s = ring_of(p.segment, rank_)->shared_copy;
  const std::uint64_t chunks = shared_copy_chunks(send.bytes);
  const int pid = segments_.peer(peer).pid;
  char* buffer = static_cast<char*>(send.buffer);
  std::uint64_t claims = s.claims.load(std::memory_order_acquire);
  // A claim for another message, or once the receiver has claimed the rest, fails.
  while ((claims >> kIdShift) == id_of(send_id) && front_of(claims) + back_of(claims) < chunks) {
    // Read before the claim; a claim that holds says they are this message's.
    const std::uint64_t destination = s.destination.load(std::memory_order_relaxed);
    if (s.bytes.load(std::memory_order_relaxed) != send.bytes) return;
    if (!s.claims.compare_exchange_weak(claims, claims + 1, std::memory_order_acq_rel)) continue;
    const std::uint64_t at = (chunks - 1 - back_of(claims)) * shared_copy_chunk_bytes(send.bytes);
    const std::uint64_t n =
        std::min<std::uint64_t>(shared_copy_chunk_bytes(send.bytes), send.bytes - at);
    if (copy_across(::process_vm_writev, pid, buffer + at, destination + at, n) != 0) {
      // The receiver reports it, or has died; its acknowledgement never comes either way.
      s.written.fetch_or(SharedCopy::kFailed, std::memory_order_release);
      return;
    }
    s.written.fetch_add(1, std::memory_order_release);
    claims = s.claims.load(std::memory_order_acquire);
  }
}

}  // namespace arcoll::shm
