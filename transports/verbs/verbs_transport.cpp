// The verbs transport (verbs_transport.hpp): setting up the queue pairs and slots, frames with
// credits, the rendezvous of large messages, completions, failing and leaving.
#include "transports/verbs/verbs_transport.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "arcoll/error.hpp"
#include "src/base/env.hpp"
#include "src/base/log.hpp"
#include "src/base/store.hpp"
#include "transports/common/landing.hpp"

namespace arcoll::verbs {
namespace {

// What a work request is, in its id: a receive slot, a send slot, or an RDMA write.
enum class Work : std::uint64_t { receive = 1, send = 2, write = 3 };

std::uint64_t work_id(Work work, int peer, std::uint64_t index) {
  return static_cast<std::uint64_t>(work) << 60 | static_cast<std::uint64_t>(peer) << 32 |
         (index & 0xffffffffu);
}
Work work_of(std::uint64_t id) { return static_cast<Work>(id >> 60); }
int peer_of(std::uint64_t id) { return static_cast<int>((id >> 32) & 0xfffffffu); }
std::uint32_t index_of(std::uint64_t id) { return static_cast<std::uint32_t>(id); }

constexpr auto kLeaveTime = std::chrono::seconds(2);
constexpr auto kAbortFlushTime = std::chrono::milliseconds(200);
constexpr auto kSleepSlice = std::chrono::milliseconds(5);
// How long a refused write or a flush waits for the peer's reason before it is the error.
constexpr auto kReasonGrace = std::chrono::milliseconds(50);

std::string what_went_wrong(Status status, int peer) {
  const std::string rank = "rank " + std::to_string(peer);
  switch (status) {
    case Status::retry_exceeded:
      return rank + " is not answering (retry exceeded: its side stopped acknowledging); it "
                    "died, or the link is down";
    case Status::flushed:
      return rank + " is gone: the queue pair to it is in error and its work was flushed; it "
                    "died, or the link is down";
    case Status::remote_access:
      return rank + " refused an RDMA write (remote access error: a wrong, stale or "
                    "out-of-bounds memory key)";
    case Status::remote_invalid:
      return rank + " could not take a message (remote invalid request: longer than its "
                    "receive)";
    case Status::local_error:
      return "a work request to " + rank + " had a wrong local key or length";
    default:
      return "a work request to " + rank + " failed (" + std::string(to_string(status)) + ")";
  }
}

}  // namespace

const char* to_string(Status status) {
  switch (status) {
    case Status::ok:
      return "success";
    case Status::flushed:
      return "flushed";
    case Status::retry_exceeded:
      return "retry exceeded";
    case Status::remote_access:
      return "remote access error";
    case Status::remote_invalid:
      return "remote invalid request";
    case Status::local_error:
      return "local error";
    case Status::other:
      break;
  }
  return "error";
}

std::unique_ptr<Device> open_device(const DeviceSetup& setup) {
  const std::string device = env::get("ARCOLL_VERBS_DEVICE").value_or("hca");
  if (device == "emulated") return open_emulated_device(setup);
  if (device != "hca")
    throw ConfigurationError("environment", "ARCOLL_VERBS_DEVICE='" + device +
                                                "' must be hca (the host's) or emulated",
                             setup.rank);
  return open_hca(setup);
}

VerbsTransport::VerbsTransport(const TransportSetup& setup)
    : rank_(setup.rank),
      size_(setup.size),
      peer_ranks_(setup.peers),
      polling_(setup.polling),
      peers_(static_cast<std::size_t>(setup.size)),
      matching_(setup.size, [this](int peer, std::exception_ptr e) { fail_peer(peer, e); }),
      last_words_(setup.size) {
  if (peer_ranks_.empty()) return;
  device_ = open_device({setup.rank, setup.size, setup.peers, setup.store, setup.options,
                         setup.job_id, setup.deadline});
  cache_ = std::make_unique<transport::RegistrationCache>(
      [this](void* address, std::size_t bytes) { return device_->register_memory(address, bytes); },
      [this](const MemoryKey& key) { device_->deregister_memory(key); });
  try {
    set_up(setup);
  } catch (...) {
    aborted_ = true;  // no goodbyes: nobody was told anything
    if (receive_key_.lkey != 0) device_->deregister_memory(receive_key_);
    if (send_key_.lkey != 0) device_->deregister_memory(send_key_);
    throw;
  }
  log::debug("verbs transport on " + device_->describe());
}

void VerbsTransport::set_up(const TransportSetup& setup) {
  const std::size_t bytes = static_cast<std::size_t>(size_) * kSlots * kSlotBytes;
  receive_slots_.resize(bytes);
  send_slots_.resize(bytes);
  receive_key_ = device_->register_memory(receive_slots_.data(), bytes);
  send_key_ = device_->register_memory(send_slots_.data(), bytes);
  StoreClient& store = *setup.store;
  auto key = [](int from, int to) {
    return "verbs/" + std::to_string(from) + "/" + std::to_string(to);
  };
  // Its process's identity first, then its queue pair's address.
  for (int p : peer_ranks_)
    store.set(key(rank_, p), last_words_.identity() + '\n' + device_->local_address(p));
  for (int p : peer_ranks_) {
    const auto theirs = store.get(key(p, rank_), setup.deadline);
    if (!theirs)
      throw TimeoutError("verbs setup",
                         "rank " + std::to_string(p) + " did not publish its queue pair", rank_, p);
    const std::size_t end = theirs->find('\n');
    if (end == std::string::npos)
      throw ProtocolError("verbs setup", "malformed queue pair address", rank_, p);
    last_words_.watch(p, theirs->substr(0, end));
    device_->connect(p, theirs->substr(end + 1));
  }
  for (int p : peer_ranks_) {
    Peer& peer = peers_[static_cast<std::size_t>(p)];
    for (int slot = 0; slot < kSlots; ++slot) {
      device_->post_receive(p, work_id(Work::receive, p, static_cast<std::uint64_t>(slot)),
                            {receive_slot(p, slot), kSlotBytes, receive_key_.lkey});
      peer.free_slots.push_back(kSlots - 1 - slot);
    }
  }
  // Every rank's receives are posted before anyone sends: a send that finds none posted is
  // retried by the device only briefly.
  store.set("verbs/posted/" + std::to_string(rank_), "");
  for (int p : peer_ranks_)
    if (!store.get("verbs/posted/" + std::to_string(p), setup.deadline))
      throw TimeoutError("verbs setup",
                         "rank " + std::to_string(p) + " did not post its receives", rank_, p);
  greet_peers(setup.deadline);
}

void VerbsTransport::greet_peers(Clock::time_point deadline) {
  for (int p : peer_ranks_) {
    Outgoing hello;
    hello.frame.kind = FrameKind::hello;
    queue(p, std::move(hello));
  }
  auto greeted = [&] {
    return std::all_of(peer_ranks_.begin(), peer_ranks_.end(),
                       [&](int p) { return peers_[static_cast<std::size_t>(p)].hello; });
  };
  while (!greeted()) {
    if (failure_) std::rethrow_exception(failure_);
    if (Clock::now() >= deadline)
      throw TimeoutError("verbs setup", "a peer's queue pair did not answer before the timeout",
                         rank_);
    progress(std::min(deadline, Clock::now() + kSleepSlice), Waiting::poll_first);
  }
}

VerbsTransport::~VerbsTransport() {
  if (!device_) return;
  try {
    if (!aborted_)
      for (int p : peer_ranks_) {
        if (peers_[static_cast<std::size_t>(p)].failed) continue;
        Outgoing goodbye;
        goodbye.frame.kind = FrameKind::goodbye;
        queue(p, std::move(goodbye));
      }
    // What was sent leaves the slots before the device goes.
    const auto deadline = Clock::now() + (aborted_ ? kAbortFlushTime : kLeaveTime);
    auto sending = [&] {
      return std::any_of(peer_ranks_.begin(), peer_ranks_.end(), [&](int p) {
        const Peer& peer = peers_[static_cast<std::size_t>(p)];
        return !peer.failed &&
               (static_cast<int>(peer.free_slots.size()) < kSlots || !peer.backlog.empty());
      });
    };
    while (sending() && Clock::now() < deadline) {
      if (!poll_once()) std::this_thread::yield();
    }
  } catch (...) {
  }
  book_.clear([&](const transport::RegistrationCache::Registration& r, const RequestPtr&) {
    cache_->release(r);
  });
  device_->deregister_memory(receive_key_);
  device_->deregister_memory(send_key_);
  cache_.reset();
}

// ---- sending --------------------------------------------------------------------------------

void VerbsTransport::post(const RequestPtr& request) {
  if (!std::binary_search(peer_ranks_.begin(), peer_ranks_.end(), request->peer))
    throw InvalidArgument("verbs", "no connection to rank " + std::to_string(request->peer),
                          rank_);
  if (failure_ || aborted_) {
    request->error = failure_ ? failure_
                              : make_error(ErrorCode::peer_failure, "verbs",
                                           "this rank gave up (abort)", rank_, request->peer);
    request->done = true;
    return;
  }
  if (request->kind == Request::Kind::recv) return post_recv(request);
  Outgoing out;
  out.frame.signature = request->signature;
  out.frame.tag = request->tag;
  out.frame.bytes = request->bytes;
  if (request->bytes <= kEagerBytes) {
    out.frame.kind = FrameKind::eager;
    out.request = request;
    out.bytes = request->buffer;
  } else {
    out.frame.kind = FrameKind::request_to_send;
    out.frame.id = book_.announce(request, cache_->acquire(request->buffer, request->bytes));
  }
  queue(request->peer, std::move(out));
}

void VerbsTransport::queue(int peer, Outgoing out) {
  peers_[static_cast<std::size_t>(peer)].backlog.push_back(std::move(out));
  flush(peer);
}

// What waits for a peer leaves in order, as credits and slots allow.
void VerbsTransport::flush(int peer) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  while (!p.backlog.empty() && !p.failed && send_frame(peer, p.backlog.front()))
    p.backlog.pop_front();
}

bool VerbsTransport::send_frame(int peer, Outgoing& out) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  // One credit stays for the frames that return credits (or say why this rank gives up): a
  // pair that has spent the rest can still tell each other its slots are free again.
  const bool reserved = !out.write &&
                        (out.frame.kind == FrameKind::credits || out.frame.kind == FrameKind::abort);
  if (p.credits <= (reserved ? 0 : 1)) return false;
  if (out.write) {
    const auto& a = out.announced;
    device_->post_write_with_imm(
        peer, work_id(Work::write, peer, out.write_id),
        {a.send->buffer, static_cast<std::uint32_t>(a.send->bytes), a.registration.key.lkey},
        out.clear.address, out.clear.rkey, out.clear.imm);
    --p.credits;
    book_.writing(out.write_id, std::move(out.announced));
    return true;
  }
  if (p.free_slots.empty()) return false;
  const int slot = p.free_slots.back();
  char* at = send_slot(peer, slot);
  out.frame.credits = static_cast<std::uint32_t>(std::exchange(p.owed, 0));
  std::size_t payload = 0;
  if (out.frame.kind == FrameKind::eager) {
    payload = out.frame.bytes;
    if (payload != 0) std::memcpy(at + sizeof(Frame), out.bytes, payload);
  } else if (out.frame.kind == FrameKind::abort) {
    payload = std::min(out.payload.size(), kEagerBytes);
    out.frame.bytes = payload;
    std::memcpy(at + sizeof(Frame), out.payload.data(), payload);
  }
  std::memcpy(at, &out.frame, sizeof(Frame));
  device_->post_send(peer, work_id(Work::send, peer, static_cast<std::uint64_t>(slot)),
                     {at, static_cast<std::uint32_t>(sizeof(Frame) + payload), send_key_.lkey});
  p.free_slots.pop_back();
  --p.credits;
  if (out.request) {  // its bytes are in the slot: the caller may have its buffer back
    out.request->transferred = out.request->bytes;
    out.request->done = true;
  }
  return true;
}

// ---- receiving ------------------------------------------------------------------------------

void VerbsTransport::post_recv(const RequestPtr& request) {
  std::shared_ptr<Message> message = matching_.post(request);
  if (!message) {
    if (peers_[static_cast<std::size_t>(request->peer)].goodbye && !request->done)
      fail_peer(request->peer, "rank " + std::to_string(request->peer) +
                                   " destroyed its communicator before sending " +
                                   request->describe());
    return;
  }
  if (message->announced) return clear_to_send(request->peer, message);
  matching_.deliver(*message, 0, message->kept.data(), message->kept.size());
  std::vector<char>().swap(message->kept);
}

// A request-to-send whose receive is posted: the sender is told where to write.
void VerbsTransport::clear_to_send(int peer, const std::shared_ptr<Message>& message) {
  Request& receive = *message->request;
  transport::RendezvousBook<Message>::Expected expected;
  expected.message = message;
  void* target = receive.buffer;
  if (!transport::lands_straight_in(receive)) {
    expected.staging = std::make_shared<std::vector<char>>(message->bytes);
    target = expected.staging->data();
  }
  expected.registration = cache_->acquire(target, message->bytes);
  Outgoing out;
  out.frame.kind = FrameKind::clear_to_send;
  out.frame.id = message->send_id;
  out.frame.address = reinterpret_cast<std::uint64_t>(target);
  out.frame.rkey = expected.registration.key.rkey;
  out.frame.imm = book_.expect(std::move(expected));
  queue(peer, std::move(out));
}

void VerbsTransport::received(int peer, int slot, std::uint32_t bytes) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  const char* at = receive_slot(peer, slot);
  Frame f;
  if (bytes < sizeof(Frame)) return fail_peer(peer, "rank " + std::to_string(peer) + " sent a frame too short");
  std::memcpy(&f, at, sizeof f);
  const char* payload = at + sizeof(Frame);
  const bool carries = f.kind == FrameKind::eager || f.kind == FrameKind::abort;
  if ((carries && (f.bytes > kEagerBytes || sizeof(Frame) + f.bytes > bytes)) ||
      f.credits > static_cast<std::uint32_t>(kSlots))
    return fail_peer(peer, "rank " + std::to_string(peer) + " sent a malformed frame");
  p.credits += static_cast<int>(f.credits);
  switch (f.kind) {
    case FrameKind::hello:
      p.hello = true;
      break;
    case FrameKind::eager: {
      if (matching_.arrive_whole(peer, f.tag, f.signature, f.bytes, [&](Request& receive) {
            transport::land(receive, 0, payload, f.bytes);
          }))
        break;
      auto message = std::make_shared<Message>();
      message->tag = f.tag;
      message->signature = f.signature;
      message->bytes = f.bytes;
      message->kept.assign(payload, payload + f.bytes);
      matching_.arrive(peer, message, /*in_place=*/true);
      break;
    }
    case FrameKind::request_to_send: {
      auto message = std::make_shared<Message>();
      message->tag = f.tag;
      message->signature = f.signature;
      message->bytes = f.bytes;
      message->send_id = f.id;
      message->announced = true;
      if (matching_.arrive(peer, message, /*in_place=*/true) ==
          transport::Matching<Message>::Arrival::matched)
        clear_to_send(peer, message);
      break;
    }
    case FrameKind::clear_to_send: {
      auto announced = book_.cleared(f.id);
      if (!announced) {
        fail_peer(peer, "rank " + std::to_string(peer) + " cleared a send that is not waiting");
        break;
      }
      Outgoing write;
      write.write = true;
      write.write_id = next_write_++;
      write.announced = std::move(*announced);
      write.clear = {f.id, f.address, f.rkey, f.imm};
      queue(peer, std::move(write));
      break;
    }
    case FrameKind::credits:
      break;
    case FrameKind::abort: {
      if (f.id != 0 && f.id < peer_failed_call_.call) peer_failed_call_ = {f.id, peer};
      fail_peer(peer, "rank " + std::to_string(peer) + " aborted: " +
                          std::string(payload, static_cast<std::size_t>(f.bytes)));
      break;
    }
    case FrameKind::goodbye:
      p.goodbye = true;
      if (const Request* waiting = matching_.first_posted(peer))
        fail_peer(peer, "rank " + std::to_string(peer) +
                            " destroyed its communicator before sending " + waiting->describe());
      break;
    default:
      return fail_peer(peer, "rank " + std::to_string(peer) + " sent an unknown frame");
  }
  repost(peer, slot);
  flush(peer);  // credits may have come
}

// An RDMA write with immediate landed: its message is whole.
void VerbsTransport::written(int peer, std::uint32_t imm) {
  auto expected = book_.arrived(imm);
  if (!expected)
    return fail_peer(peer, "rank " + std::to_string(peer) + " wrote a message nobody expects");
  cache_->release(expected->registration);
  const auto& message = expected->message;
  if (!message->request || message->request->done) return;
  if (!expected->staging) {
    matching_.delivered(*message, message->bytes);
    return;
  }
  matching_.deliver(*message, 0, expected->staging->data(), message->bytes);
}

void VerbsTransport::repost(int peer, int slot) {
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  if (p.failed) return;
  device_->post_receive(peer, work_id(Work::receive, peer, static_cast<std::uint64_t>(slot)),
                        {receive_slot(peer, slot), kSlotBytes, receive_key_.lkey});
  // Returned with the next frame, or in one of their own once half the slots are owed. That
  // one goes at once, ahead of what waits (it carries no message, and spends the credit kept
  // for it): two ranks whose frames both wait for credits would otherwise wait for ever.
  if (++p.owed >= kSlots / 2) {
    Outgoing credits;
    credits.frame.kind = FrameKind::credits;
    send_frame(peer, credits);
  }
}

// ---- completions ----------------------------------------------------------------------------

bool VerbsTransport::poll_once() {
  Completion completions[32];
  std::size_t n = device_->poll(completions);
  for (std::size_t i = 0; i < n; ++i) handle(completions[i]);
  if (suspects_.empty()) return n > 0;
  // A peer whose send or write failed may have said why first (its abort): read what came,
  // then judge. A refused write or a flush can be the doing of a peer that gave up and freed
  // its buffers a moment before its reason came: that reason is waited for, briefly.
  const std::size_t more = device_->poll(completions);
  for (std::size_t i = 0; i < more; ++i) handle(completions[i]);
  const auto now = Clock::now();
  std::vector<Suspect> judged;
  std::erase_if(suspects_, [&](const Suspect& s) {
    const Peer& p = peers_[static_cast<std::size_t>(s.peer)];
    // A peer that said goodbye left when its last call ended: what it did not need is no loss.
    if (p.failed || (s.asked_nothing && p.goodbye)) return true;
    // Its goodbye, too, may be a moment behind a frame that asked nothing of it.
    const bool maybe_its_abort =
        s.status == Status::remote_access || s.status == Status::flushed || s.asked_nothing;
    if (maybe_its_abort && !last_words_.of(s.peer) && now - s.since < kReasonGrace) return false;
    judged.push_back(s);
    return true;
  });
  for (const Suspect& s : judged)
    if (!peers_[static_cast<std::size_t>(s.peer)].failed) fail_for(s.peer, s.status);
  if (!suspects_.empty()) return true;
  for (const RequestPtr& send : std::exchange(pending_failures_, {}))
    if (!send->done) {
      send->error = failure_;
      send->done = true;
    }
  return true;
}

// A peer of this machine that gave up said why in its last words, also where its abort frame
// found no credit to go with: that is what it failed for, not the completion error.
void VerbsTransport::fail_for(int peer, Status status) {
  if (const auto words = last_words_.of(peer)) {
    if (words->failed_call != 0 && words->failed_call < peer_failed_call_.call)
      peer_failed_call_ = {words->failed_call, peer};
    return fail_peer(peer, "rank " + std::to_string(peer) + " aborted: " + words->reason);
  }
  fail_peer(peer, what_went_wrong(status, peer));
}

void VerbsTransport::handle(const Completion& c) {
  const int peer = peer_of(c.wr_id);
  if (peer < 0 || peer >= size_) return;
  Peer& p = peers_[static_cast<std::size_t>(peer)];
  switch (work_of(c.wr_id)) {
    case Work::receive:
      if (c.status != Status::ok) {
        // After its goodbye, receives flushed by its leaving are no failure, unless awaited.
        if (!p.failed && !(p.goodbye && matching_.first_posted(peer) == nullptr))
          fail_for(peer, c.status);
        return;
      }
      if (c.opcode == Opcode::receive_with_imm) {
        written(peer, c.imm);
        repost(peer, static_cast<int>(index_of(c.wr_id)));
        flush(peer);
        return;
      }
      return received(peer, static_cast<int>(index_of(c.wr_id)), c.bytes);
    case Work::send: {
      const int slot = static_cast<int>(index_of(c.wr_id));
      p.free_slots.push_back(slot);
      if (c.status != Status::ok) {
        Frame sent;
        std::memcpy(&sent, send_slot(peer, slot), sizeof sent);
        const bool asked_nothing =
            sent.kind == FrameKind::credits || sent.kind == FrameKind::goodbye;
        if (!p.failed) suspects_.push_back({peer, c.status, Clock::now(), asked_nothing});
        return;
      }
      return flush(peer);
    }
    case Work::write: {
      auto announced = book_.written(index_of(c.wr_id));
      if (!announced) return;
      cache_->release(announced->registration);
      if (c.status != Status::ok) {
        if (!p.failed) suspects_.push_back({peer, c.status, Clock::now()});
        if (!announced->send->done) pending_failures_.push_back(announced->send);
        return;
      }
      if (!announced->send->done) {
        announced->send->transferred = announced->send->bytes;
        announced->send->done = true;
      }
      return;
    }
  }
}

void VerbsTransport::progress(Clock::time_point until, Waiting waiting) {
  if (!device_ || poll_once()) return;
  if (waiting != Waiting::sleep) {
    const auto stop = std::min(until, Clock::now() + polling_.span(waiting));
    while (Clock::now() < stop) {
      if (poll_once()) return;
      if (polling_.yields) std::this_thread::yield();
    }
  }
  if (Clock::now() >= until) return;
  device_->wait(std::min(until, Clock::now() + kSleepSlice));
  poll_once();
}

// ---- failing --------------------------------------------------------------------------------

char* VerbsTransport::receive_slot(int peer, int slot) {
  return receive_slots_.data() +
         (static_cast<std::size_t>(peer) * kSlots + static_cast<std::size_t>(slot)) * kSlotBytes;
}

char* VerbsTransport::send_slot(int peer, int slot) {
  return send_slots_.data() +
         (static_cast<std::size_t>(peer) * kSlots + static_cast<std::size_t>(slot)) * kSlotBytes;
}

void VerbsTransport::fail_peer(int peer, const std::string& message) {
  fail_peer(peer, make_error(ErrorCode::peer_failure, "verbs", message, rank_, peer));
}

// One peer's failure fails every transfer in flight, to any peer: nothing lands in a buffer
// its failed call gave back (the keys of those buffers are given back too).
void VerbsTransport::fail_peer(int peer, const std::exception_ptr& error) {
  if (!failure_) failure_ = error;
  peers_[static_cast<std::size_t>(peer)].failed = true;
  fail_transfers(failure_);
}

void VerbsTransport::fail_transfers(const std::exception_ptr& error) {
  for (int r : peer_ranks_) {
    matching_.fail(r, error);
    for (Outgoing& out : peers_[static_cast<std::size_t>(r)].backlog)
      if (out.request && !out.request->done) {
        out.request->error = error;
        out.request->done = true;
      }
  }
  book_.clear([&](const transport::RegistrationCache::Registration& registration,
                  const RequestPtr& send) {
    cache_->release(registration);
    if (send && !send->done) {
      send->error = error;
      send->done = true;
    }
  });
}

void VerbsTransport::abort(const std::string& reason, std::uint64_t failed_call) noexcept {
  if (aborted_ || !device_) return;
  aborted_ = true;
  last_words_.say(reason, failed_call);
  try {
    fail_transfers(failure_ ? failure_
                            : make_error(ErrorCode::peer_failure, "verbs",
                                         "this rank gave up: " + reason, rank_));
    for (int p : peer_ranks_) {
      Peer& peer = peers_[static_cast<std::size_t>(p)];
      peer.backlog.clear();
      Outgoing out;
      out.frame.kind = FrameKind::abort;
      out.frame.id = failed_call;
      out.payload = reason;
      if (!peer.failed || peer.hello) send_frame(p, out);
    }
    const auto deadline = Clock::now() + kAbortFlushTime;
    while (Clock::now() < deadline && poll_once()) {
    }
  } catch (...) {
  }
}

std::string VerbsTransport::pending_state() const {
  std::string text;
  for (int r : peer_ranks_) {
    const Peer& p = peers_[static_cast<std::size_t>(r)];
    if (matching_.idle(r) && p.backlog.empty()) continue;
    text += "rank " + std::to_string(r) + ": " + matching_.pending_state(r) + ", " +
            std::to_string(p.backlog.size()) + " frames waiting, " + std::to_string(p.credits) +
            " credits\n";
  }
  return text + std::to_string(book_.outstanding()) + " rendezvous outstanding\n";
}

namespace {

// Across hosts where the host has an RDMA device: preferred to TCP there. Its costs, until
// measured (arbench tune), are a 100 Gbit/s port's.
const TransportRegistrar kVerbsRegistration{
    {.name = "verbs",
     .summary = "InfiniBand and RoCE verbs: RC queue pairs, eager sends through registered slots "
                "with credits, large messages by RDMA write with immediate into the receive's "
                "buffer (ARCOLL_IB_HCA, ARCOLL_IB_GID_INDEX)",
     .reach = Reach::any_host,
     .preference = 50,
     .default_costs = {.latency_us = 2.0, .bandwidth_gbs = 11.0, .reduce_gbs = 5.6},
     .create = [](const TransportSetup& setup) { return std::make_unique<VerbsTransport>(setup); },
     .available = has_rdma_device,
     .steering_variables = {"ARCOLL_IB_", "ARCOLL_VERBS_"}}};

}  // namespace
}  // namespace arcoll::verbs
