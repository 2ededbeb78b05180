// Communicator settings. Every field has an environment variable so that a job can be tuned
// without recompiling; `Options::from_env()` reads them.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "arcoll/types.hpp"

namespace arcoll {

// How the shared-memory transport writes fragments of 16 KiB and more into a peer's ring
// (Options::shm_ring_stores).
enum class ShmRingStores {
  automatic,  // streaming stores while cached copies into that ring run slower than 6 GB/s
  cached,
  streaming,
};

struct Options {
  // Deadline for every blocking wait (ARCOLL_TIMEOUT, seconds, fractions allowed; at most
  // kMaxTimeout).
  std::chrono::milliseconds timeout{60'000};
  // Algorithm for collectives (ARCOLL_ALGO); "auto" lets the library choose.
  std::string algorithm = "auto";
  // Transport between ranks (ARCOLL_TRANSPORT): a name carries every pair ("ucx");
  // "WITHIN+ACROSS" the pairs of one host and those across hosts apart ("shm+ucx", "auto+ucx");
  // "auto" lets the library choose (the most preferred transport that reaches a pair).
  std::string transport = "auto";
  // Interface the transport listens on (ARCOLL_SOCKET_IFNAME, like NCCL_SOCKET_IFNAME);
  // empty: the interface that reaches the rendezvous address.
  std::string socket_ifname;
  // TCP connections per peer pair; messages larger than 512 KiB are striped across them
  // (ARCOLL_SOCKETS_PER_PEER).
  int sockets_per_peer = 2;
  // Congestion control of the TCP connections (ARCOLL_TCP_CONGESTION): auto, system, or one of
  // the kernel's algorithms by name (cubic, reno, dctcp...), set on every connection. auto
  // keeps the system's, except on connections within a host whose ranks have a core each,
  // where an algorithm that paces (bbr) gives way to cubic, else reno: nothing there needs
  // pacing, which spaces each message's segments out at a rate it estimated early
  // (transports/tcp/congestion.cpp).
  std::string tcp_congestion = "auto";
  // Pipeline chunk of ring algorithms (ARCOLL_CHUNK_BYTES, K/M suffixes allowed).
  std::size_t chunk_bytes = 512 * 1024;
  // Rings of the multi-channel ring algorithm (ARCOLL_CHANNELS, 1..64).
  int channels = 2;

  // Mixed precision (ARCOLL_WIRE): f32 reductions carried on the wire as f16 or bf16 and
  // accumulated in f32 at every hop; f32 (the default) sends f32. Every rank ends with the
  // same result, rounded once more through the wire format.
  DataType wire = DataType::f32;
  // With a 16-bit wire, add the rounding residual of each all-reduce's input into the next
  // all-reduce of the same buffer (ARCOLL_WIRE_ERROR_FEEDBACK=1): error feedback.
  bool wire_error_feedback = false;

  // Link costs for the cost model behind "auto" (ARCOLL_TUNING_FILE, written by
  // `arbench tune`); empty: built-in defaults.
  std::string tuning_file;

  // How long a wait polls the network before sleeping (ARCOLL_BUSY_POLL_US). Negative:
  // automatic: when this host has a core for each of its ranks, 1 ms of spinning (50 us on
  // the thread that runs non-blocking calls in the background, whose callers' threads may
  // want the cores); else 1 ms of polling that yields the core between polls (a spinning rank
  // would keep the CPU from the very peer it waits for; a yielding one hands it over).
  std::chrono::microseconds busy_poll{-1};

  // Shared memory: large messages are read straight from the sender's memory with Linux
  // cross-memory attach (ARCOLL_SHM_SINGLE_COPY=1, the default where the kernel allows it),
  // or copied through the shared rings (0).
  bool shm_single_copy = true;
  // Which messages are large (ARCOLL_SHM_SINGLE_COPY_BYTES): those above this size. Below it,
  // two user-space copies through the rings, which stay in cache, beat the kernel's one (a
  // send/recv, all-to-all or gather of 32 KiB to 512 KiB on 2 ranks: 0.4-0.85 of Open MPI's
  // busbw read from 1 MiB, 0.97-1.08 from 16 KiB, on an Intel Xeon). Messages of 12-16 KiB
  // read from a buffer unchanged since the last call go faster across (send/recv of 16 KiB on
  // 2 ranks, 2.9-3.0 us through the rings, 2.0 read across), but from one just written,
  // as a real sender's is, slower (in place, 5.3-5.6 GB/s through the rings, 3.1-3.3 across).
  // Calls larger than the caches (streaming_bytes; copy_streaming_bytes for collectives that
  // only copy) go through the rings at every size, unless transparent huge pages are "always"
  // (a read across then pins few pages).
  std::size_t shm_single_copy_bytes = 16 * 1024;
  // The same for calls whose receivers reduce what lands, or pass it on as it lands
  // (all-reduce, reduce-scatter, reduce, broadcast; ARCOLL_SHM_SINGLE_COPY_PIPELINED_BYTES):
  // they take it straight out of the ring in one pass, where a message read across processes
  // is read whole into a buffer first. A broadcast within the caches reads messages across
  // from 128 KiB on 2 ranks (its root shares the copy), above 256 KiB on more, whose receivers
  // pass each message on (or above this, when lower).
  std::size_t shm_single_copy_pipelined_bytes = 1024 * 1024;
  // ARCOLL_SHM_RING_STORES=auto|cached|streaming. Where the peer's core is far (another die or
  // socket, or a VM's vCPUs placed apart), a cached store first takes back every line of the
  // ring the peer has read, one by one; a streaming store does not, but the peer then reads
  // the lines from memory (transports/shm/ring_stores.hpp).
  ShmRingStores shm_ring_stores = ShmRingStores::automatic;

  // Collectives on buffers of at least this size (ARCOLL_STREAMING_BYTES) write what they
  // receive with streaming stores, which skip the caches: the result is larger than they are
  // and is not read again soon, and a cached store would first read every line it writes.
  // Not reductions in place: there each line written was just read as the rank's own operand.
  std::size_t streaming_bytes = std::size_t{16} << 20;
  // The same for collectives that only copy (all-gather, all-to-all, gather, scatter, broadcast;
  // ARCOLL_COPY_STREAMING_BYTES). Unset (`auto`): from streaming_bytes, or where that is less
  // and every rank of the host has a core, from the size whose send and receive buffers on every
  // rank of the host fill the last-level cache (a quarter of it on 2 ranks). A large
  // cache holds such results where it would not a reduction's three buffers: 2 ranks of an
  // Intel Xeon with 260 MiB of L3, medians of 3 interleaved runs, streaming -> cached, out of
  // place / in place: 32 MiB all-to-all -24% / -55%, gather -36% / -51%, scatter -52% / -48%,
  // all-gather +9% / -36%, 16 MiB broadcast -29% / -41%; but all-reduce +28% and
  // reduce-scatter +54% at 32 MiB out of place. With more ranks than cores, the streaming
  // stores win (4 ranks on those 2 cores, 32 MiB broadcast +17% / +48% cached).
  std::optional<std::size_t> copy_streaming_bytes;

  // Collectives on device memory of at least this size (ARCOLL_DEVICE_PIPELINE_BYTES) run on the
  // device also where a peer's transport cannot read device buffers (another host's): each
  // message to such a peer is copied to host memory as it is sent, and lands in device memory
  // as it arrives, so that the copies of one chunk overlap the network time of the others.
  // Smaller ones are copied to host memory whole before the call and back after it: two copies
  // in all, where a message's copies each cost a device's latency.
  std::size_t device_pipeline_bytes = std::size_t{1} << 20;

  // End-to-end integrity (ARCOLL_CHECKSUM=1): every message a collective or send() moves
  // carries the CRC32C of its bytes, checked where it lands before it is used; a mismatch fails
  // the call naming the link (sender, receiver, transport). Costs a CRC pass on each side.
  bool checksum = false;

  static Options from_env();
};

// The longest timeout, a week: deadlines far beyond it would overflow the clock.
inline constexpr std::chrono::milliseconds kMaxTimeout{7LL * 24 * 3600 * 1000};
// Seconds as ARCOLL_TIMEOUT and arbench's --timeout give them ("60", "0.5"): nullopt unless a
// positive number of at most kMaxTimeout.
std::optional<std::chrono::milliseconds> parse_timeout(std::string_view seconds);
// Why `timeout` cannot be one ("must be positive"), or empty when it can.
std::string timeout_problem(std::chrono::milliseconds timeout);
// Why `setting` cannot be Options::tcp_congestion, or empty when it can: auto, system, or what
// may be a kernel algorithm's name (lower case, digits, '_'; 1 to 15 characters).
std::string tcp_congestion_problem(const std::string& setting);

// "512", "64K", "1M", "2G", "1T" (powers of 1024; an optional trailing "B"/"iB" is accepted).
// nullopt when malformed or out of range.
std::optional<std::size_t> parse_byte_size(std::string_view text);

}  // namespace arcoll
