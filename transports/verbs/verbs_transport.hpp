// InfiniBand and RoCE verbs transport: one RC queue pair per peer (device.hpp), connection data
// through the store.
//
// Small messages go eagerly, copied into pre-registered bounce buffers (slots) and sent; the
// receiver has the same number of slots posted for each peer, and a sender spends a credit per
// message, which the receiver returns (on any frame it sends, or in one of its own once half are
// owed) as it reposts its slots. Large ones go by the receiver-driven rendezvous of
// transports/common/rendezvous.hpp: a request-to-send meets its receive through Matching (a
// mismatch fails both sides before a byte moves), the clear-to-send names the receive's own
// buffer (it lands as a copy) or a staging buffer (it is reduced from once complete), and the
// sender writes it there with an RDMA write with immediate, whose completion at the receiver
// ends it. Buffers are registered through transports/common/registration.hpp.
//
// Every error completion fails the peer, named with what the device said (a peer that stopped
// answering, a refused key, flushed receives of a queue pair in error); an abort stops every
// queue pair (the device touches no memory of a failed call after), then its reason goes to
// the peers still reachable.
#pragma once

#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "transports/common/matching.hpp"
#include "transports/common/peer_process.hpp"
#include "transports/common/registration.hpp"
#include "transports/common/rendezvous.hpp"
#include "transports/transport.hpp"
#include "transports/verbs/device.hpp"

namespace arcoll::verbs {

// The kinds of frame a send carries.
enum class FrameKind : std::uint8_t { hello = 1, eager, request_to_send, clear_to_send, credits,
                                      abort, goodbye };

// At the start of every slot a send carries; an eager message's bytes, or an abort's reason,
// follow it.
struct Frame {
  FrameKind kind;
  std::uint8_t pad[3];
  std::uint32_t credits;  // slots the sender reposted for us since its last frame
  std::uint64_t signature;
  std::uint64_t bytes;    // eager: its bytes; request-to-send: the message's; abort: the reason's
  std::uint64_t id;       // request/clear-to-send: the send; abort: the collective given up on
  std::uint64_t address;  // clear-to-send
  std::uint32_t tag;
  std::uint32_t rkey;  // clear-to-send
  std::uint32_t imm;   // clear-to-send
  std::uint32_t pad2;
};
static_assert(sizeof(Frame) == 56);

inline constexpr std::size_t kSlotBytes = 8 * 1024;
// Messages up to this size go eagerly.
inline constexpr std::size_t kEagerBytes = kSlotBytes - sizeof(Frame);
// Slots per peer, each way; the sender keeps one credit for frames that return credits.
inline constexpr int kSlots = 64;

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(const TransportSetup& setup);
  ~VerbsTransport() override;

  std::string_view name() const override { return "verbs"; }
  void post(const RequestPtr& request) override;
  void progress(Clock::time_point until, Waiting waiting) override;
  void wake() noexcept override {
    if (device_) device_->wake();
  }
  std::exception_ptr failure() const override { return failure_; }
  void abort(const std::string& reason, std::uint64_t failed_call) noexcept override;
  PeerFailedCall peer_failed_call() override { return peer_failed_call_; }
  std::string pending_state() const override;

  // Registrations made and dropped (tests of the registration cache).
  const transport::RegistrationCache& registrations() const { return *cache_; }

 private:
  // A message kept before its receive: an eager one's bytes.
  struct Message : transport::AnnouncedMessage {
    std::vector<char> kept;
    bool announced = false;  // a request-to-send, fetched by clear-to-send once matched
  };
  // A frame waiting for a credit or a slot, or a write for a credit (in order, per peer).
  struct Outgoing {
    Frame frame{};
    std::string payload;     // eager bytes (copied when the frame is built) or abort reason
    RequestPtr request;      // an eager send's, done once its bytes are copied into a slot
    const void* bytes = nullptr;  // an eager send's bytes, copied when a slot frees
    bool write = false;      // an RDMA write of an announced send
    std::uint64_t write_id = 0;
    transport::RendezvousBook<Message>::Announced announced;
    transport::ClearToSend clear{};
  };
  struct Peer {
    int credits = kSlots - 1;  // receives the peer has posted for us, less those used
    int owed = 0;              // our reposted slots not yet told to it
    std::deque<Outgoing> backlog;
    std::vector<int> free_slots;  // of our send slots to it
    bool hello = false;
    bool goodbye = false;
    bool failed = false;
  };

  void set_up(const TransportSetup& setup);
  void greet_peers(Clock::time_point deadline);
  bool poll_once();
  void fail_for(int peer, Status status);
  void handle(const Completion& c);
  void received(int peer, int slot, std::uint32_t bytes);
  void written(int peer, std::uint32_t imm);
  void post_recv(const RequestPtr& request);
  void clear_to_send(int peer, const std::shared_ptr<Message>& message);
  void queue(int peer, Outgoing out);
  void flush(int peer);
  bool send_frame(int peer, Outgoing& out);
  void repost(int peer, int slot);
  char* receive_slot(int peer, int slot);
  char* send_slot(int peer, int slot);
  void fail_peer(int peer, const std::string& message);
  void fail_peer(int peer, const std::exception_ptr& error);
  void fail_transfers(const std::exception_ptr& error);

  int rank_;
  int size_;
  std::vector<int> peer_ranks_;
  Polling polling_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<transport::RegistrationCache> cache_;
  // Slots: kSlots per peer, each way, in two registered buffers.
  std::vector<char> receive_slots_, send_slots_;
  transport::MemoryKey receive_key_{}, send_key_{};
  std::vector<Peer> peers_;
  transport::Matching<Message> matching_;
  transport::RendezvousBook<Message> book_;
  std::uint64_t next_write_ = 1;
  // Peers whose send or write failed, judged once what came before is read (poll_once), and
  // the sends of failed writes, which fail with them.
  struct Suspect {
    int peer;
    Status status;
    Clock::time_point since;
    // A frame that asked nothing of the peer (credits, goodbye): no failure where the peer has
    // said goodbye, as it may leave before such a frame lands.
    bool asked_nothing = false;
  };
  std::vector<Suspect> suspects_;
  std::vector<RequestPtr> pending_failures_;
  std::exception_ptr failure_;
  PeerFailedCall peer_failed_call_;
  // Why a peer of this machine gave up, readable where its abort frame found no credit.
  transport::LastWords last_words_;
  bool aborted_ = false;
};

}  // namespace arcoll::verbs
