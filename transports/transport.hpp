// A transport moves the bytes of point-to-point requests between this rank and its peers.
// It knows nothing of collectives: the message engine hands it sends and receives, and drives
// it with progress(). Each transport is one folder of transports/ and describes itself in its
// registration: where it applies, how much it is preferred there, and its link costs until
// they are measured. Routing, tuning defaults, cluster planning, the --transport lists and the
// test suite's runs all come from the registry.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "arcoll/options.hpp"
#include "arcoll/transport_costs.hpp"
#include "src/base/registry.hpp"
#include "src/base/request.hpp"
#include "src/base/socket.hpp"

namespace arcoll {

class StoreClient;
struct DeviceMemoryInfo;

// How a progress() that finds nothing to do waits: polling for the busy-poll time first (a
// message is likely soon: a collective's peers are at work, and the waiting thread has nothing
// else to do), polling briefly (the waiting thread runs calls in the background, for callers
// whose threads want the cores meanwhile), or sleeping at once (the caller is idle and expects
// nothing soon).
enum class Waiting { poll_first, poll_briefly, sleep };

// How long waits poll before they sleep, by Waiting, and whether polls give the core away
// between them (ranks > cores).
struct Polling {
  std::chrono::microseconds busy{0};   // Waiting::poll_first
  std::chrono::microseconds brief{0};  // Waiting::poll_briefly
  bool yields = false;
  std::chrono::microseconds span(Waiting waiting) const {
    return waiting == Waiting::poll_first     ? busy
           : waiting == Waiting::poll_briefly ? brief
                                              : std::chrono::microseconds{0};
  }
  // `configured` (Options::busy_poll, for both ways) where not negative; else the default for
  // a host with a core per rank, or with more ranks than cores (`oversubscribed`).
  static Polling for_host(std::chrono::microseconds configured, bool oversubscribed);
};

struct TransportSetup {
  int rank = 0;
  int size = 1;
  // The other ranks this transport connects to, ascending; a communicator may give each
  // transport a part of its peers (shm within a host, tcp across hosts).
  std::vector<int> peers;
  StoreClient* store = nullptr;  // for exchanging addresses; null for a world of one
  const Options* options = nullptr;
  std::string listen_address;              // local IPv4 address to listen on
  std::uint64_t job_id = 0;                // shared by every rank of this job
  std::string job_token;                   // the job's secret (src/base/auth.hpp); may be empty
  net::Clock::time_point deadline;         // for connection setup
  Polling polling;                         // how waits poll before they sleep
  bool oversubscribed = false;             // more ranks on this machine than cores to run on
};

// A peer's word that it failed, from collective `call` on (see Transport::abort).
struct PeerFailedCall {
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};
  std::uint64_t call = kNone;
  int rank = -1;
};

// Memory that every peer of a transport reads and only its owner writes: a board per rank
// (the shm transport's segments). Collectives too small to be worth a message meet there, as
// in UCC's shared-memory team; what a board holds is the caller's business.
class SharedBoards {
 public:
  virtual ~SharedBoards() = default;
  // Of each rank's board; a multiple of the cache line.
  virtual std::size_t board_bytes() const = 0;
  virtual std::byte* own_board() = 0;
  virtual const std::byte* board_of(int peer) const = 0;
  // After this rank wrote its board: wakes the peers sleeping in await_boards().
  virtual void announce_board() = 0;
  // Whether `ready()` holds. Polls it as `waiting` says, then sleeps once (until `until`, a
  // slice at most, or a peer's announcement, message or wake()), watching the peers' messages
  // meanwhile as progress() does: false also when a peer failed (failure() then says how).
  virtual bool await_boards(const std::function<bool()>& ready, net::Clock::time_point until,
                            Waiting waiting) = 0;
  // Whether `peer` destroyed its communicator (said goodbye): it posts nothing more.
  virtual bool departed(int peer) const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string_view name() const = 0;

  // Starts a send or receive to one of the peers it was set up for. Requests to one peer with the
  // same tag match in posting order. A receive's bytes land as its Request::landing says
  // (transports/common/landing.hpp).
  virtual void post(const RequestPtr& request) = 0;
  // Sends a whole small message of a point-to-point call (its receivers keep it, as
  // Request::Receivers::copy, with no streaming stores) now, where the transport can: true,
  // with nothing left to wait for; false, touching nothing, where it must go through post().
  // `overwritten`: the call's receive overwrites `data`, which its caller would otherwise copy
  // before post(): a transport may then send larger messages whole now too.
  virtual bool send_now(int /*peer*/, std::uint32_t /*tag*/, std::uint64_t /*signature*/,
                        const void* /*data*/, std::size_t /*bytes*/, bool /*overwritten*/) {
    return false;
  }
  // Takes a whole small message of a point-to-point call from `peer` (`tag`, `signature`,
  // `bytes`) into `data` where it is the next thing from that peer and has come or comes within
  // a few looks: true, with nothing left to wait for; false, touching nothing, where the receive
  // must go through post().
  virtual bool receive_now(int /*peer*/, std::uint32_t /*tag*/, std::uint64_t /*signature*/,
                           void* /*data*/, std::size_t /*bytes*/) {
    return false;
  }
  // Moves bytes of pending requests; waits for the network until `until` at most, returning
  // as soon as something happened.
  virtual void progress(net::Clock::time_point until, Waiting waiting) = 0;
  // Moves what is ready, without waiting or reading the clock, for a wait's first looks (a
  // small message mostly lands within moments); false where this transport has no such step
  // or has failed: the caller then waits through progress(), which says why.
  virtual bool poll() { return false; }
  // Makes a progress() sleeping in another thread of this process return now, or the next
  // one not sleep: for a loop whose work also comes from its own process (a server share
  // beside its worker), so that it can sleep long between messages.
  virtual void wake() noexcept = 0;
  // The first peer failure seen (connection lost, abort received, malformed data), if any.
  // Once set, the transport fails every new request.
  virtual std::exception_ptr failure() const = 0;
  // One line per peer with pending work, for diagnosing a stuck job (ARCOLL_LOG=debug).
  virtual std::string pending_state() const = 0;
  // Tells every peer, best effort and without blocking, that this rank is failing, from the
  // collective numbered `failed_call` on (the one it is in, or the next it would have made).
  virtual void abort(const std::string& reason, std::uint64_t failed_call) noexcept = 0;
  // The earliest collective a peer said it failed (abort()), where known: a call of that
  // number or later must fail here too, even where every message it needed had arrived, so
  // that the ranks agree on whether it happened. Read at the end of every collective: cheap. A
  // transport that hears notices only while it is moved takes in what has arrived first (a call
  // can end on messages that came before the notice, without a turn of the transport).
  virtual PeerFailedCall peer_failed_call() = 0;
  // Called as this rank leaves a call, every request of it done here: finishes within
  // `timeout` what a peer may still wait for from this rank in that call (UCX may hold a
  // rendezvous's acknowledgement until its worker moves again), as the rank may go on to
  // another communicator's calls for long and leave this transport unmoved. A transport with
  // nothing to finish reads no clock: small calls end here too.
  virtual void leave_call(std::chrono::milliseconds /*timeout*/) {}
  // After a call that succeeded: whether the transport parked itself with work that only
  // moving it finishes (transports/common/parked.hpp), for the process's waits to move until
  // take_back(), which the engine calls before it touches the transport again.
  virtual bool park() { return false; }
  virtual void take_back() {}
  // Whether post() takes receives with a Request::forward, sending each landed piece on itself
  // (written into the send as it is reduced, with no second pass over the result).
  virtual bool forwards() const { return false; }
  // Whether one buffer sent to several peers of this machine at once costs the sender about
  // one message's time: each peer reads its large messages from the sender's memory itself,
  // in parallel (UCX over cma, knem or xpmem). shm says no: it copies such a buffer into each
  // peer's ring, reading across only the chunks of a relayed broadcast.
  virtual bool fans_out() const { return false; }
  // Whether large messages of a reduction (Request::Receivers::pipelined) are read by their
  // receivers from the sender's buffer, the result of such a message, forwarded
  // (Request::forward), being sent on whole and read back the same way: two copies by the
  // kernel and a reduction (shm over cross-memory attach, which the ranks of a host agree on;
  // UCX where every peer reads across, by its rendezvous).
  virtual bool reads_reductions_across() const { return false; }
  // Whether a small message costs neither end a system call (a store and a poll in shared
  // memory; UCX over shared memory or RDMA): the engine then sends one to every peer at once
  // where rounds of messages would wait on one another. TCP's cost one at each end.
  virtual bool small_messages_cheap() const { return false; }
  // The boards shared with every peer of this transport; null where it has none.
  virtual SharedBoards* boards() { return nullptr; }
  // Whether post() takes point-to-point requests on this kind of device memory as they are
  // (Request::memory): a peer then reads the buffer from its device, with no host copy.
  virtual bool takes(const DeviceMemoryInfo& /*memory*/) const { return false; }
};

// Which pairs of ranks a transport can connect.
enum class Reach : std::uint8_t {
  same_host,  // ranks of one host only
  any_host,
};

struct TransportInfo {
  static constexpr const char* kKind = "transport";
  std::string name;
  std::string summary;
  Reach reach = Reach::any_host;
  // Among the transports that reach a pair of ranks, the most preferred carries its messages
  // (ARCOLL_TRANSPORT=auto).
  int preference = 0;
  // What the cost model assumes of its links until they are measured (arbench tune).
  TransportCosts default_costs;
  std::function<std::unique_ptr<Transport>(const TransportSetup&)> create;
  // Whether this host can carry it (an RDMA device is there): auto routes only to transports
  // that can; a forced one fails at setup saying why. Null: always.
  std::function<bool()> available;
  // Prefixes of the environment variables beyond Options that change the way its messages go,
  // and so its link costs (UCX_TLS picks UCX's own transports): kept calibrations are keyed by
  // their values.
  std::vector<std::string> steering_variables;
};

using TransportRegistry = Registry<TransportInfo>;
using TransportRegistrar = Registrar<TransportInfo>;

// The transport that carries messages between two ranks on the same host or on different
// hosts, by `choice` (Options::transport): a name carries every pair; "WITHIN+ACROSS" (each a
// name or "auto"), the pairs of one host and those across hosts apart ("shm+ucx"); "auto" the
// most preferred that reaches them and is available here. Throws InvalidArgument saying why
// where transport_choice_problem does.
const TransportInfo& transport_for(bool same_host, const std::string& choice = "auto");
// Why `choice` names no transport for some pairs (an unknown name, a transport within hosts
// only after the '+'), or "" when it does.
std::string transport_choice_problem(const std::string& choice);

}  // namespace arcoll
