// The receiver-driven rendezvous of large messages, for transports whose device writes into a
// peer's memory (RDMA write with immediate): the sender announces a message (request-to-send,
// with the call's signature: it meets its receive through Matching like any message, so a
// mismatch fails both sides before a byte moves); once the receive is posted, the receiver says
// where to write (clear-to-send: its buffer's address and key when the message lands as a
// copy, else a staging buffer that is reduced from when complete) and which immediate will
// mark the write; the sender writes; the write's completion at the receiver ends it.
//
// This is the bookkeeping both sides keep meanwhile, written once; moving the announcements
// and writes is the transport's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "src/base/request.hpp"
#include "transports/common/matching.hpp"
#include "transports/common/registration.hpp"

namespace arcoll::transport {

// A request-to-send: the message's size and its matching fields travel with it.
struct RequestToSend {
  std::uint64_t send_id = 0;
  std::uint64_t bytes = 0;
  std::uint64_t signature = 0;
  std::uint32_t tag = 0;
};

// A clear-to-send: where the sender writes, and the immediate that marks the write.
struct ClearToSend {
  std::uint64_t send_id = 0;
  std::uint64_t address = 0;
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;
};

// An announced message being received.
struct AnnouncedMessage : Incoming {
  std::uint64_t send_id = 0;
};

// `Message`: the transport's, an AnnouncedMessage or derived from one.
template <class Message = AnnouncedMessage>
class RendezvousBook {
 public:
  // ---- sender
  struct Announced {
    RequestPtr send;
    RegistrationCache::Registration registration;
  };
  // A large send announced: its id for the request-to-send.
  std::uint64_t announce(RequestPtr send, RegistrationCache::Registration registration) {
    const std::uint64_t id = next_send_id_++;
    announced_.emplace(id, Announced{std::move(send), registration});
    return id;
  }
  // The announced send a clear-to-send names (nullopt: none, a protocol error).
  std::optional<Announced> cleared(std::uint64_t send_id) { return take(announced_, send_id); }
  // Sends whose write is under way: their registrations go back when the write completes.
  void writing(std::uint64_t write_id, Announced announced) {
    writing_.emplace(write_id, std::move(announced));
  }
  std::optional<Announced> written(std::uint64_t write_id) { return take(writing_, write_id); }

  // ---- receiver
  // A message matched with its receive, about to be written: where it lands (`staging`:
  // registered memory of the transport's, reduced from when complete) and the immediate that
  // will mark the write.
  struct Expected {
    std::shared_ptr<Message> message;
    RegistrationCache::Registration registration;
    std::shared_ptr<std::vector<char>> staging;  // null: the receive's own buffer
  };
  std::uint32_t expect(Expected expected) {
    // Immediates wrap; one still awaited is skipped (0 is never used: it marks none).
    while (next_imm_ == 0 || expected_.count(next_imm_) != 0) ++next_imm_;
    const std::uint32_t imm = next_imm_++;
    expected_.emplace(imm, std::move(expected));
    return imm;
  }
  std::optional<Expected> arrived(std::uint32_t imm) { return take(expected_, imm); }

  // Everything outstanding, for a transport that fails or closes: `end(registration, send)`
  // once for each (send: the announced send's request, null on the receiving side).
  template <class End>
  void clear(const End& end) {
    for (auto& [id, a] : announced_) end(a.registration, a.send);
    for (auto& [id, a] : writing_) end(a.registration, a.send);
    for (auto& [id, e] : expected_) end(e.registration, RequestPtr{});
    announced_.clear();
    writing_.clear();
    expected_.clear();
  }
  bool idle() const { return announced_.empty() && writing_.empty() && expected_.empty(); }
  std::size_t outstanding() const {
    return announced_.size() + writing_.size() + expected_.size();
  }

 private:
  template <class Map, class Key>
  static auto take(Map& map, const Key& key) -> std::optional<typename Map::mapped_type> {
    auto it = map.find(key);
    if (it == map.end()) return std::nullopt;
    auto value = std::move(it->second);
    map.erase(it);
    return value;
  }

  std::uint64_t next_send_id_ = 1;
  std::uint32_t next_imm_ = 1;
  std::map<std::uint64_t, Announced> announced_;
  std::map<std::uint64_t, Announced> writing_;
  std::map<std::uint32_t, Expected> expected_;
};

}  // namespace arcoll::transport
