// The UCX transport's failures and its leaving: peers judged lost, their last words, abort,
// goodbyes and the endpoints closed (ucx_transport.cpp has setup, sending and waiting;
// ucx_receiving.cpp, receiving).
#include <thread>

#include "arcoll/error.hpp"
#include "src/base/log.hpp"
#include "transports/common/peer_process.hpp"
#include "transports/ucx/ucx_transport.hpp"

namespace arcoll::ucx {
namespace {

// How long leaving may take: goodbyes and closing the endpoints (a stuck peer does not hold
// this rank up longer), and an abort's reasons.
constexpr auto kLeaveTime = std::chrono::seconds(2);
constexpr auto kAbortFlushTime = std::chrono::milliseconds(200);
// How long an abort lets transfers in flight end (see abort()).
constexpr auto kTransfersEndTime = std::chrono::seconds(1);

}  // namespace

// ---- failing and leaving --------------------------------------------------------------------

int UcxTransport::peer_of(ucp_ep_h ep) const {
  for (int p : peer_ranks_)
    if (peers_[static_cast<std::size_t>(p)].ep == ep) return p;
  return -1;
}

// Called back from within the worker's progress: what the peer said last (an abort's reason)
// may still be on its way, so the loss is judged once progress has read what came.
void UcxTransport::peer_lost(ucp_ep_h ep, ucs_status_t status) {
  if (const int peer = peer_of(ep); peer >= 0) connection_lost(peer, status);
}

void UcxTransport::connection_lost(int peer, ucs_status_t status) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  p.lost = true;
  if (p.lost_status == UCS_OK) p.lost_status = status;
}

void UcxTransport::judge_lost_peers() {
  for (int r : peer_ranks_) {
    Peer& p = peers_[static_cast<std::size_t>(r)];
    if (!p.lost || p.lost_status == UCS_OK || p.failed) continue;
    for (int drained = 0; drained < 100 && !p.failed && ucp_worker_progress(worker_) != 0;)
      ++drained;
    const ucs_status_t status = std::exchange(p.lost_status, UCS_OK);
    // After its goodbye, a closed connection is the peer leaving, unless we wait for it.
    if (p.failed || (p.goodbye && matching_.first_posted(r) == nullptr)) continue;
    if (take_last_word(r)) continue;
    fail_peer(r, ErrorCode::peer_failure,
              "rank " + std::to_string(r) + " is gone: the connection was lost (UCX: " +
                  ucs_status_string(status) + "); it exited, crashed or was killed");
  }
  if (!failure_) return;
  for (const RequestPtr& request : pending_failures_)
    if (!request->done) {
      request->error = failure_;
      request->done = true;
    }
  pending_failures_.clear();
}

void UcxTransport::check_peers_alive() {
  for (int r : peer_ranks_) {
    Peer& p = peers_[static_cast<std::size_t>(r)];
    if (!p.pidfd || p.failed || !transport::has_ended(p.pidfd)) continue;
    // What it said last, a goodbye or an abort, counts: read all that came.
    for (int drained = 0; drained < 100 && !p.failed && ucp_worker_progress(worker_) != 0;)
      ++drained;
    if (p.failed) continue;
    if (p.goodbye && matching_.first_posted(r) == nullptr) {
      p.pidfd.reset();
      continue;
    }
    p.lost = true;
    if (take_last_word(r)) continue;
    fail_peer(r, ErrorCode::peer_failure,
              "rank " + std::to_string(r) +
                  " is gone: its process ended without saying goodbye; it exited, crashed or "
                  "was killed");
  }
}

// A peer gone before messages it sent earlier came (UCX's shared memory loses what was still
// in the ended process's memory) may have said why: in its last words (same machine), or in its
// abort, waiting among what came ahead of its turn. That reason is what it failed for, not its
// going.
bool UcxTransport::take_last_word(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (const auto words = last_words_.of(peer)) {
    if (words->failed_call != 0 && words->failed_call < peer_failed_call_.call)
      peer_failed_call_ = {words->failed_call, peer};
    fail_peer(peer, ErrorCode::peer_failure,
              "rank " + std::to_string(peer) + " aborted: " + words->reason);
    return true;
  }
  for (auto it = p.early.begin(); it != p.early.end(); ++it) {
    if (it->second.id != kAbort || it->second.descriptor != nullptr) continue;
    Early last = std::move(it->second);
    p.early.erase(it);
    bool kept = false;
    handle(peer, kAbort, last.header, last.bytes.data(), last.bytes.size(), Arrived::passing, kept);
    return true;
  }
  return false;
}

void UcxTransport::fail_peer(int peer, ErrorCode code, const std::string& message) {
  fail_peer(peer, make_error(code, "ucx", message, rank_, peer));
}

// One peer's failure fails the transport: every transfer in flight, to any peer, ends now, so
// that nothing lands in a buffer its failed call gave back (a message from a healthy peer that
// comes later is held, not landed).
void UcxTransport::fail_peer(int peer, const std::exception_ptr& error) {
  if (!failure_) failure_ = error;
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  p.failed = true;
  for (auto& [sequence, early] : p.early)
    if (early.descriptor != nullptr) release(early.descriptor);
  p.early.clear();
  fail_transfers(failure_);
}

void UcxTransport::fail_transfers(const std::exception_ptr& error) {
  for (int r : peer_ranks_) matching_.fail(r, error);
  for (auto& [key, sending] : sending_)
    if (sending->request && !sending->request->done) {
      sending->request->error = error;
      sending->request->done = true;
    }
  // Announced and not yet cleared, or cleared and not yet sent: nothing of theirs is in UCX.
  auto fail = [&](const RequestPtr& send) {
    send->error = error;
    send->done = true;
  };
  announced_.clear([&](const auto& /*registration*/, const RequestPtr& send) {
    if (send) fail(send);
  });
  for (const RequestPtr& send : to_stream_) fail(send);
  to_stream_.clear();
}

void UcxTransport::release(void* descriptor) noexcept {
  if (descriptor != nullptr) ucp_am_data_release(worker_, descriptor);
}

void UcxMessage::give_back() noexcept {
  if (held_from != nullptr && held_from->worker != nullptr) {
    for (const KeptBytes& piece : kept)
      if (piece.descriptor != nullptr) {
        ucp_am_data_release(held_from->worker, piece.descriptor);
        held_from->eager_bytes -= piece.held_length;
      }
    if (descriptor != nullptr) ucp_am_data_release(held_from->worker, descriptor);
  }
  if (held_from != nullptr) descriptor = nullptr;
  kept.clear();
  kept_bytes = 0;
}

void UcxTransport::abort(const std::string& reason, std::uint64_t failed_call) noexcept {
  if (aborted_ || peer_ranks_.empty()) return;
  aborted_ = true;
  last_words_.say(reason, failed_call);
  fail_transfers(failure_ ? failure_
                          : make_error(ErrorCode::peer_failure, "ucx",
                                       "this rank gave up: " + reason, rank_));
  try {
    for (int r : peer_ranks_) {
      Peer& p = peers_[static_cast<std::size_t>(r)];
      if (p.lost || p.ep == nullptr) continue;
      auto record = std::make_unique<Sending>();
      record->header = {p.next_send++, 0, failed_call, 0, rank_, 0, 0};
      record->peer = r;
      record->text = reason.substr(0, 4096);
      const std::string& text = record->text;
      send(std::move(record), kAbort, text.data(), text.size(), UCP_AM_SEND_FLAG_EAGER);
    }
  } catch (...) {
  }
  const auto deadline = Clock::now() + kAbortFlushTime;
  drain_sends(deadline, /*reasons_only=*/true);
  // The failed call's buffers go back to its caller: UCX must read and write them no more.
  // Transfers in flight are let end first (a peer inside a call moves its side; one that fails
  // too ends them), within a bound. Where one has not ended by then (a peer asleep in its own
  // code after it asked for a message), the worker is never moved again: the transport goes
  // without a turn of it (shut_down()), so UCX touches no buffer. A peer that has not fetched
  // a message yet reads the reason first (start_fetches()). Not waited for: transfers to a peer
  // of this machine whose process has ended, which never end (UCX's shared memory does not
  // notice, and its endpoints, without peer error handling, cannot be closed by force): every
  // survivor of a killed rank waited the whole bound for them. Fetches from such a peer are
  // waited for, within kAbortFlushTime: read by this rank over cma, they end at once, failing
  // (its memory can be read no more), and a worker destroyed with one queued on UCX's cma
  // endpoint fails UCX's assertion, killing the process (1 run in 40 of a 4 MiB call aborted
  // on 2 ranks, the abort read after a fetch began); those its sender had to push never end.
  const auto now = Clock::now();
  const auto bound = now + kTransfersEndTime, ended_bound = now + kAbortFlushTime;
  auto can_end = [&](int r) {
    const Peer& p = peers_[static_cast<std::size_t>(r)];
    if (!(p.pidfd && transport::has_ended(p.pidfd))) return busy(r);
    return fetching_from(r) && Clock::now() < ended_bound;
  };
  while (std::any_of(peer_ranks_.begin(), peer_ranks_.end(), can_end) && Clock::now() < bound) {
    if (ucp_worker_progress(worker_) == 0) std::this_thread::yield();
    judge_lost_peers();
  }
  frozen_ = std::any_of(peer_ranks_.begin(), peer_ranks_.end(), [&](int r) { return busy(r); });
}

bool UcxTransport::busy(int peer) const { return sending_to(peer) || fetching_from(peer); }

bool UcxTransport::sending_to(int peer) const {
  return std::any_of(sending_.begin(), sending_.end(),
                     [&](const auto& s) { return s.second->peer == peer && s.second->request; });
}

bool UcxTransport::fetching_from(int peer) const {
  return std::any_of(fetching_.begin(), fetching_.end(), [&](const auto& f) {
    return f.second->request && f.second->request->peer == peer;
  });
}

void UcxTransport::drain_sends(Clock::time_point deadline, bool reasons_only) noexcept {
  auto pending = [&] {
    return std::any_of(sending_.begin(), sending_.end(), [&](const auto& s) {
      return !reasons_only || !s.second->text.empty();
    });
  };
  while (pending() && Clock::now() < deadline) {
    if (ucp_worker_progress(worker_) == 0) std::this_thread::yield();
  }
}

void UcxTransport::close_endpoints(Clock::time_point deadline) noexcept {
  std::vector<ucs_status_ptr_t> closing;
  bool forced = false;
  for (int r : peer_ranks_) {
    Peer& p = peers_[static_cast<std::size_t>(r)];
    if (p.ep == nullptr) continue;
    const bool force = p.lost || busy(r);
    forced = forced || force;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    const ucs_status_ptr_t status = ucp_ep_close_nbx(std::exchange(p.ep, nullptr), &param);
    if (status != nullptr && !UCS_PTR_IS_ERR(status)) closing.push_back(status);
  }
  while ((!closing.empty() || (forced && (!sending_.empty() || !fetching_.empty()))) &&
         Clock::now() < deadline) {
    ucp_worker_progress(worker_);
    std::erase_if(closing, [](ucs_status_ptr_t request) {
      if (ucp_request_check_status(request) == UCS_INPROGRESS) return false;
      ucp_request_free(request);
      return true;
    });
  }
  // Closes that did not finish are given up: UCX must have every request back before its
  // worker goes.
  for (ucs_status_ptr_t request : closing) {
    ucp_request_cancel(worker_, request);
    ucp_request_free(request);
  }
}

void UcxTransport::shut_down() noexcept {
  if (worker_ == nullptr) return;
  try {
    if (!aborted_)
      for (int r : peer_ranks_) {
        const Peer& p = peers_[static_cast<std::size_t>(r)];
        if (!p.lost && p.ep != nullptr) send_word(r, kGoodbye);
      }
  } catch (...) {
  }
  // A peer has read what this rank sent once it answers the goodbye: leaving before would take
  // the messages still in this process's UCX memory with it (shared memory) from a peer busy
  // in a call. A peer that said goodbye first reads nothing more, and may have left already,
  // its answers with it (every rank but the last to leave waited the whole time for one).
  // Not waited for long: a peer may be away in its own code.
  if (!aborted_) {
    const auto deadline = Clock::now() + kLeaveTime;
    auto answered = [&] {
      return std::all_of(peer_ranks_.begin(), peer_ranks_.end(), [&](int r) {
        const Peer& p = peers_[static_cast<std::size_t>(r)];
        return p.farewell || p.goodbye || p.lost || p.failed || p.ep == nullptr;
      });
    };
    while (!answered() && Clock::now() < deadline) progress(deadline, Waiting::poll_first);
  }
  if (frozen_) {  // see abort(): no turn of the worker
    for (int r : peer_ranks_) {
      Peer& p = peers_[static_cast<std::size_t>(r)];
      if (p.ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      const ucs_status_ptr_t status = ucp_ep_close_nbx(std::exchange(p.ep, nullptr), &param);
      if (status != nullptr && !UCS_PTR_IS_ERR(status)) ucp_request_free(status);
    }
  } else {
    // After an abort peers may not be listening: their endpoints are not waited for long.
    const auto deadline = Clock::now() + (aborted_ ? kAbortFlushTime : kLeaveTime);
    drain_sends(deadline, /*reasons_only=*/false);
    close_endpoints(deadline);
  }
  // Transfers still in flight end with the worker: their callbacks (which free them) come from
  // its destruction. Descriptors of messages never fetched, and buffers kept, go back to UCX;
  // frozen, nothing goes back: it all ends with the worker, and no message gives anything back
  // later.
  if (!frozen_) {
    for (const auto& weak : held_)
      if (auto message = weak.lock()) message->give_back();
    for (const auto& message : to_fetch_) release(std::exchange(message->descriptor, nullptr));
    for (int r : peer_ranks_)
      for (auto& [sequence, early] : peers_[static_cast<std::size_t>(r)].early)
        release(std::exchange(early.descriptor, nullptr));
  }
  held_from_worker_.worker = nullptr;
  // The records go after the worker: its destruction may still call back with them.
  ucp_worker_destroy(std::exchange(worker_, nullptr));
  sending_.clear();
  fetching_.clear();
}

std::string UcxTransport::pending_state() const {
  std::string text;
  for (int r : peer_ranks_) {
    const Peer& p = peers_[static_cast<std::size_t>(r)];
    const auto sends = std::count_if(sending_.begin(), sending_.end(),
                                     [&](const auto& s) { return s.second->peer == r; });
    if (matching_.idle(r) && sends == 0 && p.early.empty()) continue;
    text += "rank " + std::to_string(r) + ": " + matching_.pending_state(r) + ", " +
            std::to_string(sends) + " sends in flight, " + std::to_string(p.early.size()) +
            " messages ahead of their turn\n";
  }
  return text;
}

namespace {

// Reaches any host; routed to only when asked for (ARCOLL_TRANSPORT=ucx): over this build's
// shared memory and TCP, arcoll's own shm and tcp are faster. Its costs are those of UCX's
// TCP between two emulated hosts (ucx_perftest: about 3.6 us, 1.8 GB/s).
const TransportRegistrar kUcxRegistration{
    {.name = "ucx",
     .summary = "UCX active messages on one UCP worker (UCX_TLS, UCX_NET_DEVICES pass through)",
     .reach = Reach::any_host,
     .preference = 5,
     .default_costs = {.latency_us = 3.6, .bandwidth_gbs = 1.8, .reduce_gbs = 5.6},
     .create = [](const TransportSetup& setup) { return std::make_unique<UcxTransport>(setup); },
     .available = nullptr,
     .steering_variables = {"UCX_"}}};

}  // namespace
}  // namespace arcoll::ucx
