// UCX transport (ucx_transport.hpp): setting up the worker and endpoints, sending, and waiting
// on the worker's event fd (ucx_context.cpp makes UCX's context; ucx_receiving.cpp receives;
// ucx_leaving.cpp fails and leaves).
#include "transports/ucx/ucx_transport.hpp"

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/device_memory.hpp"
#include "src/base/log.hpp"
#include "src/base/store.hpp"
#include "transports/common/huge_pages.hpp"
#include "transports/common/landing.hpp"
#include "transports/common/peer_process.hpp"
#include "transports/ucx/ucx_context.hpp"

namespace arcoll::ucx {

namespace {

// From this size a send through TCP may complete with a part still queued in UCX (its copy
// protocols); smaller ones are written whole, or not complete (see sent()).
constexpr std::size_t kQueuedSendBytes = 8192;
// Active messages up to this size, header included, fit UCX's short protocol over its shared
// memory (a fifo element of UCX_MM_FIFO_ELEM_SIZE, 128 B): sent at once (send_at_once). Larger
// ones never were, and asking cost a call more (2 ranks, sendrecv of 512 B: 9% slower).
constexpr std::size_t kAtOnceBytes = 80;
// Setup's hello carries this many bytes: more than UCX sends inline (100 B through its shared
// memory), so that its copying path to each peer is up once setup is over. The first message
// too large to go inline otherwise stays in the sender's worker until the peer answers
// (UCX 1.13's shared memory): an abort's reason sent by a rank that then returned to its caller,
// moving its worker no more, never came, and a peer completed the call it had aborted.
constexpr std::size_t kHelloBytes = 256;
// A sleep on the event fd lasts this long at most, so that a dead peer's pidfd is looked at.
constexpr auto kSleepSlice = std::chrono::milliseconds(5);
// A reduction's message larger than this to a peer of this machine, where every peer reads
// across (reads_reductions_across), goes by rendezvous in calls within the caches: fetched by
// the kernel into a staging buffer and reduced, its result sent back the same way straight
// into the partner's buffer, two copies and a reduction where eager pieces take three. With
// the default chunk (512 KiB) only the whole halves of a 2-rank all-reduce of 2-16 MiB are so
// large. 2 ranks on 2 cores of an Intel Xeon, medians of 6 interleaved runs, out of place / in
// place: 4 MiB -8%/-2%, 8 MiB -9%/-8%.
constexpr std::size_t kReductionRendezvousBytes = 1 << 20;
// The largest message to a peer of this machine that goes eager, by what its receivers do with
// it (kCopyEagerBytes; reductions read across up to kReductionRendezvousBytes, within the
// caches; the others at every size: see ucx_transport.hpp).
std::size_t eager_limit(const Request& send, bool reads_reductions_across) {
  switch (send.receivers) {
    case Request::Receivers::copy:
    case Request::Receivers::exchanged:
      return kCopyEagerBytes;
    case Request::Receivers::pipelined:
    case Request::Receivers::kept_by_one:  // moved as a reduction's
      if (reads_reductions_across && !send.streaming_stores) return kReductionRendezvousBytes;
      [[fallthrough]];
    case Request::Receivers::gathered:
    case Request::Receivers::relayed:
      return std::numeric_limits<std::size_t>::max();
  }
  return kCopyEagerBytes;
}
// Through TCP a rendezvous's handshake waits behind the bytes queued on the link (a shaped
// link's queue holds milliseconds of them), once per message: messages that are reduced as
// they land go eager there up to this size, and the others up to kCopyEagerBytes, unless
// UCX_RNDV_THRESH says otherwise. 2 emulated hosts of 2 ranks on 1 Gbit/s links, UCX_TLS=tcp,
// UCX's time over arcoll's TCP's in the same run, all-reduces of 4-64 MiB (ring, 512 KiB
// chunks): x1.07-1.29 in 4 runs with UCX's own choice, x0.97-1.16 in 3 with this rule. Eager
// at every size (UCX_RNDV_THRESH=inf), all-gathers of 128 and 256 KiB lost: 1.3-1.5 and
// 5.8-7.1 ms against 1.1 and 2.3 by rendezvous (why was not found).
constexpr std::size_t kTcpEagerBytes = 1 << 20;
bool rendezvous_threshold_set() {
  static const bool set = std::getenv("UCX_RNDV_THRESH") != nullptr;
  return set;
}
// UCX's transports by which a receiver reads the sender's memory itself.
constexpr std::string_view kReadingLanes[] = {"cma/", "knem/", "xpmem/"};

ucs_status_t on_message(void* arg, const void* header, std::size_t header_length, void* data,
                        std::size_t length, const ucp_am_recv_param_t* param) {
  auto* handler = static_cast<std::pair<UcxTransport*, AmId>*>(arg);
  if (header_length != sizeof(Header)) {
    log::warn("ucx: dropped an active message with a header of " + std::to_string(header_length) +
              " B (not an arcoll rank's)");
    return UCS_OK;
  }
  Header h;
  std::memcpy(&h, header, sizeof h);
  const Arrived how = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0   ? Arrived::rendezvous
                      : (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0 ? Arrived::keepable
                                                                             : Arrived::passing;
  return handler->first->arrived(handler->second, h, data, length, how);
}

void on_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  static_cast<UcxTransport*>(arg)->peer_lost(ep, status);
}

// A request freed before it completes calls nothing back: each is freed here, in its callback.
void on_sent(void* request, ucs_status_t status, void* record) {
  auto* sending = static_cast<std::pair<UcxTransport*, void*>*>(record);
  sending->first->send_done(sending->second, status);
  ucp_request_free(request);
}

// leave_call()'s flush of a peer's endpoint is done: `user_data` is that peer's Peer::flushing.
void on_flushed(void* request, ucs_status_t /*status*/, void* flushing) {
  *static_cast<void**>(flushing) = nullptr;
  ucp_request_free(request);
}

std::string key_of(int rank) {
  return "ucx/" + std::to_string(rank);
}

}  // namespace

UcxTransport::UcxTransport(const TransportSetup& setup)
    : rank_(setup.rank),
      peer_ranks_(setup.peers),
      polling_(setup.polling),
      announces_large_copies_(!transport::huge_pages_unasked()),
      context_(Context::shared(setup.rank)),
      peers_(static_cast<std::size_t>(setup.size)),
      matching_(setup.size, [this](int peer, std::exception_ptr e) { fail_peer(peer, e); }),
      last_words_(setup.size) {
  ucp_worker_params_t worker{};
  worker.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // The engine serves a communicator from one thread at a time (the caller's or its progress
  // thread's, under its call lock); wake() comes from others, and ucp_worker_signal allows it.
  worker.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  Context::check(ucp_worker_create(context_->handle, &worker, &worker_), "ucp_worker_create",
                 rank_);
  held_from_worker_.worker = worker_;
  try {
    Context::check(ucp_worker_get_efd(worker_, &event_fd_), "ucp_worker_get_efd", rank_);
    for (AmId id : {kData, kAbort, kGoodbye, kHello, kFarewell, kAnnounce, kClear, kCleared}) {
      handlers_[id - kData] = {this, id};
      ucp_am_handler_param_t handler{};
      handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                           UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
      handler.id = id;
      handler.flags = UCP_AM_FLAG_WHOLE_MSG;
      handler.cb = &on_message;
      handler.arg = &handlers_[id - kData];
      Context::check(ucp_worker_set_am_recv_handler(worker_, &handler),
                     "ucp_worker_set_am_recv_handler", rank_);
    }
    if (peer_ranks_.empty()) return;
    ucp_address_t* address = nullptr;
    std::size_t length = 0;
    Context::check(ucp_worker_get_address(worker_, &address, &length), "ucp_worker_get_address",
                   rank_);
    std::string mine = last_words_.identity() + '\n';
    mine.append(reinterpret_cast<const char*>(address), length);
    ucp_worker_release_address(worker_, address);
    setup.store->set(key_of(rank_), mine);
    for (int p : peer_ranks_) {
      const auto theirs = setup.store->get(key_of(p), setup.deadline);
      if (!theirs)
        throw TimeoutError("ucx setup",
                           "rank " + std::to_string(p) + " did not publish its UCX address", rank_,
                           p);
      const std::size_t end = theirs->find('\n');
      if (end == std::string::npos || end + 1 >= theirs->size())
        throw ProtocolError("ucx setup", "malformed UCX address", rank_, p);
      Peer& peer = peers_[static_cast<std::size_t>(p)];
      peer.pidfd = transport::watch_if_local(theirs->substr(0, end));
      peer.same_machine = static_cast<bool>(peer.pidfd);
      last_words_.watch(p, theirs->substr(0, end));
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(theirs->data() + end + 1);
      // UCX 1.13's shared-memory transports do not handle peer errors: asked to, it takes TCP
      // even between ranks of one machine (5.7 us against 0.3 for an 8 B all-reduce). A peer
      // of this machine is watched through its pidfd instead; one elsewhere, by UCX.
      ep.err_mode = peer.pidfd ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &on_error;
      ep.err_handler.arg = this;
      const ucs_status_t made = ucp_ep_create(worker_, &ep, &peer.ep);
      if (made == UCS_ERR_UNREACHABLE)
        throw ConfigurationError("ucx setup",
                                 "no transport UCX may use reaches rank " + std::to_string(p) +
                                     " (ucp_ep_create: " + ucs_status_string(made) + ") " +
                                     Context::selection(),
                                 rank_, p);
      Context::check(made, "ucp_ep_create", rank_);
    }
    greet_peers(setup.deadline);
  } catch (...) {
    aborted_ = true;  // no goodbyes: nobody is told anything yet
    shut_down();
    throw;
  }
}

void UcxTransport::send_word(int peer, AmId id, const void* bytes, std::size_t length) {
  auto record = std::make_unique<Sending>();
  record->header = {peers_[static_cast<std::size_t>(peer)].next_send++, 0, 0, 0, rank_, 0, 0};
  record->peer = peer;
  send(std::move(record), id, bytes, length, UCP_AM_SEND_FLAG_EAGER);
}

void UcxTransport::greet_peers(Clock::time_point deadline) {
  static const char greeting[kHelloBytes] = {};
  for (int r : peer_ranks_) send_word(r, kHello, greeting, sizeof greeting);
  auto greeted = [&] {
    return sending_.empty() && std::all_of(peer_ranks_.begin(), peer_ranks_.end(), [&](int r) {
             return peers_[static_cast<std::size_t>(r)].hello;
           });
  };
  while (!greeted()) {
    if (failure_) std::rethrow_exception(failure_);
    if (Clock::now() >= deadline) {
      int missing = -1;
      for (int r : peer_ranks_)
        if (!peers_[static_cast<std::size_t>(r)].hello && missing < 0) missing = r;
      throw TimeoutError("ucx setup",
                         "no word from rank " + std::to_string(missing) +
                             " over UCX before the timeout: can UCX reach it (UCX_TLS, "
                             "UCX_NET_DEVICES)?",
                         rank_, missing);
    }
    progress(std::min(deadline, Clock::now() + kSleepSlice), Waiting::poll_first);
  }
  // Which endpoints go through TCP, whose sends UCX completes while they may still wait in its
  // queue (see sent()); shared memory's are in the peer's memory when they complete. And
  // whether every peer reads this rank's rendezvous messages from its memory (a lane of
  // cma, knem or xpmem: fans_out()); every rank of a job with the same UCX settings sees the
  // same lanes.
  fans_out_ = !peer_ranks_.empty();
  for (int r : peer_ranks_) {
    Peer& p = peers_[static_cast<std::size_t>(r)];
    char* text = nullptr;
    std::size_t length = 0;
    FILE* info = open_memstream(&text, &length);
    if (info == nullptr) {
      fans_out_ = false;
      continue;
    }
    ucp_ep_print_info(p.ep, info);
    std::fclose(info);
    const std::string_view lanes(text, length);
    p.queues_sends = lanes.find("tcp/") != std::string_view::npos;
    parks_ = parks_ || p.queues_sends;
    fans_out_ = fans_out_ && std::any_of(std::begin(kReadingLanes), std::end(kReadingLanes),
                                         [&](std::string_view lane) {
                                           return lanes.find(lane) != std::string_view::npos;
                                         });
    std::free(text);
  }
}

UcxTransport::~UcxTransport() {
  parking_.take_back();
  shut_down();
}

bool UcxTransport::takes(const DeviceMemoryInfo& memory) const {
  return context_->moves_cuda && memory.name == "cuda";
}

// ---- sending --------------------------------------------------------------------------------

void UcxTransport::post(const RequestPtr& request) {
  if (!std::binary_search(peer_ranks_.begin(), peer_ranks_.end(), request->peer))
    throw InvalidArgument("ucx", "no connection to rank " + std::to_string(request->peer), rank_);
  if (failure_ || aborted_) {
    request->error = failure_ ? failure_
                              : make_error(ErrorCode::peer_failure, "ucx",
                                           "this rank gave up (abort)", rank_, request->peer);
    request->done = true;
    return;
  }
  if (request->kind == Request::Kind::recv) return post_recv(request);
  const Peer& p = peers_[static_cast<std::size_t>(request->peer)];
  const bool local = p.same_machine && !p.queues_sends;
  const bool copied = request->receivers == Request::Receivers::copy ||
                      request->receivers == Request::Receivers::exchanged;
  if (local && announces_large_copies_ && copied && request->streaming_stores &&
      request->bytes > kCopyEagerBytes)
    return announce(request);
  const bool eager = local && request->bytes <= eager_limit(*request, reads_reductions_across());
  // Past the eager limits a message to this machine goes by rendezvous: with fifo segments of
  // kFifoSegmentBytes UCX's own threshold left it at 32 KiB (all-to-all of 64 KiB on 2 ranks:
  // 5.0-5.3 us, 4.4-4.6 by rendezvous, as with UCX_RNDV_THRESH=16384).
  if (!eager) {
    const bool reduced = request->receivers == Request::Receivers::pipelined ||
                         request->receivers == Request::Receivers::kept_by_one;  // moved alike
    const bool eager_through_tcp = p.queues_sends && !rendezvous_threshold_set() &&
                                   request->bytes <= (reduced ? kTcpEagerBytes : kCopyEagerBytes);
    return send_data(request, 0, request->bytes,
                     local               ? UCP_AM_SEND_FLAG_RNDV
                     : eager_through_tcp ? UCP_AM_SEND_FLAG_EAGER
                                         : 0);
  }
  send_pieces(request, kData);
}

void UcxTransport::send_pieces(const RequestPtr& request, AmId id) {
  std::size_t offset = 0;
  do {
    const std::size_t piece = std::min(kPieceBytes, request->bytes - offset);
    send_data(request, offset, piece, UCP_AM_SEND_FLAG_EAGER, id);
    offset += piece;
  } while (offset < request->bytes && !request->done);
}

// A copy of a call beyond the caches (streaming stores) to a peer of this machine goes in
// pieces through UCX's fifo, as eager messages go, but only once its receiver has posted the
// receive and said so: the sender copies in while the receiver copies out, where a rendezvous's
// read across (cma) has the receiver copy alone and pin the sender's 4 KiB pages one by one,
// and no piece comes before its receive to be copied aside, as eager ones do from a sender a
// call ahead (ranks outnumbering the cores). UCX's own protocols of 1.13 (UCX_PROTO_ENABLE)
// move large messages so; not taken whole, as they slowed smaller ones. 64 MiB calls on an AMD
// EPYC, medians of 3 interleaved runs, out of place, ms: 2 ranks, pieces sent unannounced
// against the rendezvous, all-gather 8.7 against 12.8 and all-to-all 8.7 against 12.5, and
// announced ones as fast as those (8.9 against 8.9, both); 4 ranks on 2 cores, announced
// against the rendezvous, all-gather 19.3 against 19.9, all-to-all 22.5 against 25.8, scatter
// 5.2 against 6.2, where unannounced pieces took 1.6 and 2.2 times as long as the rendezvous. Not
// in huge pages (transports/common/huge_pages.hpp), where the read across won (2 ranks, 64 MiB:
// all-to-all 5.9 against 8.0 ms in pieces, all-gather 6.6 against 8.0).
void UcxTransport::announce(const RequestPtr& request) {
  Peer& p = peers_[static_cast<std::size_t>(request->peer)];
  const std::uint64_t number = announced_.announce(request, {});
  auto record = std::make_unique<Sending>();
  record->header = {p.next_send++, request->signature, 0, request->tag, rank_,
                    number,        request->bytes};
  record->peer = request->peer;
  send(std::move(record), kAnnounce, nullptr, 0, UCP_AM_SEND_FLAG_EAGER);
}

bool UcxTransport::send_now(int peer, std::uint32_t tag, std::uint64_t signature, const void* data,
                            std::size_t bytes, bool /*overwritten*/) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  // Where UCX_RNDV_THRESH is set, post() lets UCX choose between eager and rendezvous.
  const bool local = p.same_machine && !p.queues_sends;
  if (failure_ || aborted_ || (!local && rendezvous_threshold_set())) return false;
  return send_at_once(p, kData, {0, signature, 0, tag, rank_, 0, bytes}, data, bytes);
}

bool UcxTransport::send_at_once(Peer& p, AmId id, Header header, const void* data,
                                std::size_t bytes) {
  if (sizeof header + bytes > kAtOnceBytes) return false;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
  param.flags = UCP_AM_SEND_FLAG_EAGER;
  header.sequence = p.next_send;
  const ucs_status_ptr_t status =
      ucp_am_send_nbx(p.ep, id, &header, sizeof header, data, bytes, &param);
  // Forced to complete at once, UCX never returns a request in flight (which would read the
  // header on this stack later): UCS_ERR_NO_RESOURCE where it cannot, or an endpoint's failure,
  // both said again by send().
  assert(!UCS_PTR_IS_PTR(status));
  if (status != nullptr) return false;
  ++p.next_send;
  return true;
}

void UcxTransport::send_data(const RequestPtr& request, std::size_t offset, std::size_t bytes,
                             std::uint32_t flags, AmId id) {
  Peer& p = peers_[static_cast<std::size_t>(request->peer)];
  const Header header{0, request->signature, 0, request->tag, rank_, offset, request->bytes};
  const char* data = static_cast<const char*>(request->buffer) + offset;
  // A whole small message sent at once is done with no record, which would keep a count of its
  // request: the count's atomic release, after UCX's stores into the peer's fifo, waited for
  // them (2 ranks, 8 B sendrecv: a fifth of the time in that release).
  if (flags == UCP_AM_SEND_FLAG_EAGER && request->memory == nullptr &&
      !flushed_after_sending(p, request->bytes) && send_at_once(p, id, header, data, bytes)) {
    request->transferred += bytes;
    if (request->transferred == request->bytes) request->done = true;
    return;
  }
  auto record = std::make_unique<Sending>();
  record->header = header;
  record->header.sequence = p.next_send++;
  record->request = request;
  record->piece_bytes = bytes;
  record->peer = request->peer;
  send(std::move(record), id, data, bytes, flags);
}

void UcxTransport::send(std::unique_ptr<Sending> record, AmId id, const void* buffer,
                        std::size_t bytes, std::uint32_t flags) {
  record->callback = {this, record.get()};
  ucp_request_param_t param{};
  param.op_attr_mask =
      UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  param.cb.send = &on_sent;
  param.user_data = &record->callback;
  param.flags = flags;
  if (record->request && record->request->memory != nullptr) {
    // Device memory (takes()): said, where UCX would ask the driver of each message.
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memory_type = UCS_MEMORY_TYPE_CUDA;
  }
  const int peer = record->peer;
  const ucs_status_ptr_t status =
      ucp_am_send_nbx(peers_[static_cast<std::size_t>(peer)].ep, id, &record->header,
                      sizeof(Header), buffer, bytes, &param);
  if (status == nullptr) return sent(std::move(record));
  if (UCS_PTR_IS_ERR(status)) {
    // The endpoint failed; what this send's sequence number was to carry never comes.
    connection_lost(peer, UCS_PTR_STATUS(status));
    if (record->request) {
      record->request->error = make_error(ErrorCode::peer_failure, "ucx",
                                          "sending to rank " + std::to_string(peer) + " failed: " +
                                              ucs_status_string(UCS_PTR_STATUS(status)),
                                          rank_, peer);
      record->request->done = true;
    }
    return;
  }
  record->handle = status;
  Sending* key = record.get();
  sending_.emplace(key, std::move(record));
}

void UcxTransport::send_done(void* record, ucs_status_t status) {
  auto it = sending_.find(static_cast<Sending*>(record));
  if (it == sending_.end()) return;
  std::unique_ptr<Sending> done = std::move(it->second);
  sending_.erase(it);
  if (!done->request || done->request->done) return;
  if (status == UCS_OK) return sent(std::move(done));
  // Failed with its connection: judged (and the request with it) once what the peer sent
  // before, an abort's reason perhaps, is read.
  connection_lost(done->peer, status);
  pending_failures_.push_back(std::move(done->request));
}

// UCX completes a send that may still wait in this process (in its queue for a transport out
// of resources, in TCP's): it goes out only as this worker moves, which a rank gone on to
// another communicator's calls may not do for long, while the peer waits for it there. A send
// through such an endpoint is done once the endpoint is flushed (a round trip), when it is
// large enough that TCP may have taken only part of it.
bool UcxTransport::flushed_after_sending(const Peer& p, std::size_t bytes) {
  return p.queues_sends && bytes >= kQueuedSendBytes;
}

void UcxTransport::sent(std::unique_ptr<Sending> record) {
  if (!record->request || record->request->done) return;
  if (!record->flushing && flushed_after_sending(peers_[static_cast<std::size_t>(record->peer)],
                                                 record->request->bytes)) {
    record->flushing = true;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &on_sent;
    param.user_data = &record->callback;
    const ucs_status_ptr_t flushing =
        ucp_ep_flush_nbx(peers_[static_cast<std::size_t>(record->peer)].ep, &param);
    if (UCS_PTR_IS_PTR(flushing)) {
      record->handle = flushing;
      Sending* key = record.get();
      sending_.emplace(key, std::move(record));
      return;  // on_sent() comes back through send_done()
    }
    if (UCS_PTR_IS_ERR(flushing)) {
      connection_lost(record->peer, UCS_PTR_STATUS(flushing));
      pending_failures_.push_back(std::move(record->request));
      return;
    }
  }
  Request& request = *record->request;
  request.transferred += record->piece_bytes;
  if (request.transferred == request.bytes) request.done = true;
}

// ---- waiting --------------------------------------------------------------------------------

// One turn of the worker, and what follows from it: lost peers judged, matched rendezvous
// messages fetched. Whether anything moved.
bool UcxTransport::turn() {
  bool moved = ucp_worker_progress(worker_) != 0;
  judge_lost_peers();
  if (!to_fetch_.empty()) {
    start_fetches();
    moved = true;
  }
  if (!to_stream_.empty()) {
    std::vector<RequestPtr> cleared;
    cleared.swap(to_stream_);
    for (const RequestPtr& send : cleared)
      if (!send->done) send_pieces(send, kCleared);
    moved = true;
  }
  return moved;
}

void UcxTransport::progress(Clock::time_point until, Waiting waiting) {
  const auto entered = Clock::now();
  if (entered >= next_alive_check_) {
    check_peers_alive();
    next_alive_check_ = entered + kSleepSlice;
  }
  if (turn()) return;
  if (waiting != Waiting::sleep) {
    const auto stop = std::min(until, entered + polling_.span(waiting));
    const unsigned turns_per_clock_read = polling_.yields ? 1 : 16;
    for (unsigned turns = 1; turns % turns_per_clock_read != 0 || Clock::now() < stop; ++turns) {
      if (turn()) return;
      if (polling_.yields) sched_yield();
    }
  }
  const auto now = Clock::now();
  if (now >= until) return;
  if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) {  // events came meanwhile
    turn();
    return;
  }
  std::vector<pollfd> fds{{event_fd_, POLLIN, 0}};
  for (int p : peer_ranks_) {
    const Peer& peer = peers_[static_cast<std::size_t>(p)];
    if (peer.pidfd && !peer.failed) fds.push_back({peer.pidfd.get(), POLLIN, 0});
  }
  const auto sleep = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::min<Clock::duration>(until - now, kSleepSlice));
  ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(1, sleep.count())));
  turn();
  check_peers_alive();
}

// Notices are heard only as the worker moves, and a call can end on messages held since
// before a peer's abort came (they arrived during setup, or in an earlier turn): the worker is
// moved until idle first, within a bound.
PeerFailedCall UcxTransport::peer_failed_call() {
  if (!frozen_)
    for (int turns = 0; turns < 16 && turn(); ++turns) {
    }
  return peer_failed_call_;
}

// Once UCX has fetched a rendezvous message it acknowledges it to the sender, whose send
// completes on that; when the fifo to the sender is full, the acknowledgement waits in this
// worker for its next turn. A rank that went on to another communicator then left the sender
// waiting for it there, while it waited for the sender in the other communicator's call (4
// ranks, UCX and TCP communicators in turn, 256 MiB all-reduces: a timeout in every run). The
// endpoints of the peers fetched from are flushed on the way out: what waits goes.
void UcxTransport::leave_call(std::chrono::milliseconds timeout) {
  bool flushing = false;
  for (Peer& p : peers_) {
    if (!p.fetched) continue;
    p.fetched = false;
    if (p.flushing == nullptr && !p.failed && !p.lost) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
      param.cb.send = &on_flushed;
      param.user_data = &p.flushing;
      const ucs_status_ptr_t status = ucp_ep_flush_nbx(p.ep, &param);
      // A failed flush is the endpoint's failure, which its error handler reports.
      if (UCS_PTR_IS_PTR(status)) p.flushing = status;
    }
    flushing = flushing || p.flushing != nullptr;
  }
  // Not waited for past the timeout: a peer that does not take it fails its own call in time.
  const Clock::time_point deadline = flushing ? Clock::now() + timeout : Clock::time_point{};
  while (flushing && Clock::now() < deadline) {
    progress(deadline, Waiting::poll_first);
    flushing = std::any_of(peers_.begin(), peers_.end(),
                           [](const Peer& p) { return p.flushing != nullptr; });
  }
}

// A peer reached over TCP may wait, after this rank left the call, for this worker to answer
// the flush that completes its send (see sent()) or to take bytes queued in it: moved by the
// process's waits until the next call, whatever communicator they are in (with UCX and TCP
// communicators in turn between two emulated hosts, a rank otherwise waited in the TCP one for
// a peer that waited for it in the UCX one, in half the runs).
bool UcxTransport::park() {
  if (!parks_ || aborted_ || failure_) return false;
  parking_.park();
  return true;
}

// A failure found here is kept for the next call, which moves the worker itself.
bool UcxTransport::move_while_parked() noexcept {
  try {
    turn();
    return true;
  } catch (...) {
    return false;
  }
}

void UcxTransport::wake() noexcept {
  if (worker_ != nullptr) ucp_worker_signal(worker_);
}

}  // namespace arcoll::ucx
