// The shared boards of a transport (transports/transport.hpp) as a communicator's calls use
// them. A rank's board holds the call it is in, written at every collective (with the
// signature and root of its last two calls), so that a peer waiting on the boards learns that
// this rank went into another call, and a rooted call checks its root by reading the peers'
// boards instead of sending messages; and two posts, used in turn: the k-th exchange posts
// into post k % 2. A rank writes post k only after every rank posted k - 1, which each did
// after reading every part of k - 2: a part is never overwritten while a peer may still read
// it, and nobody acknowledges anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "transports/transport.hpp"

namespace arcoll {

class CallBoards {
 public:
  CallBoards(SharedBoards& boards, int rank, int size);

  // Bytes a rank may post per exchange, on boards of `board_bytes`.
  static std::size_t capacity_of(std::size_t board_bytes);
  std::size_t capacity() const { return capacity_; }
  // The transport's boards these calls are laid out on.
  SharedBoards& shared() const { return boards_; }
  // At the start of every collective, numbered by `sequence`, described by `signature`, with
  // `root` (0 for collectives without one).
  void enter(std::uint64_t sequence, std::uint64_t signature, int root);
  // Posts this rank's part of its next exchange, made in the
  // collective numbered `sequence` described by `signature`, and wakes peers that sleep
  // waiting for it.
  void post(const void* data, std::size_t bytes, std::uint64_t sequence, std::uint64_t signature);
  // Whether every rank has posted its part of the current exchange; looks only at the ranks
  // not seen yet: cheap enough to spin on.
  bool all_posted();
  // The lowest rank whose part has not been seen yet (-1: all have).
  int first_missing() const;
  // The parts of the current exchange, by rank, once all_posted().
  std::span<const std::byte* const> parts() const { return parts_; }

  // A rank in another call than the one of this rank's current exchange: all_posted() found
  // its part to be of another call (another signature or sequence number), or, not posted
  // yet, its board says it is in this call's step with another signature, or in a later one.
  struct Disagreement {
    int rank;
    std::uint64_t signature;
    std::uint64_t sequence;  // of the rank's call
    bool posted;             // a part of that call, where this rank's exchange expects one
  };
  std::optional<Disagreement> disagreement() const;
  // The root check of the call this rank entered last: the lowest rank not yet seen in it
  // (-1 once every rank has entered it with this rank's signature and root); a rank that
  // entered it otherwise is returned in `other` (its root in `other_root`). No rank is ever
  // more than one call ahead of a rank still checking (every call waits for each rank to enter
  // it), so a peer's board still holds its entry of this call.
  int first_not_entered_alike(std::optional<Disagreement>& other, int& other_root);

 private:
  const std::byte* slot_of(int rank, std::uint64_t exchange) const;

  SharedBoards& boards_;
  int rank_;
  int size_;
  std::size_t slot_bytes_;
  std::size_t capacity_;
  std::uint64_t exchange_ = 0;  // this rank's exchanges so far
  std::uint64_t sequence_ = 0;  // the call of the current exchange
  std::uint64_t signature_ = 0;
  // The call entered last, and the ranks below `entered_seen_` seen in it alike.
  std::uint64_t entered_sequence_ = 0, entered_signature_ = 0;
  int entered_root_ = 0;
  int entered_seen_ = 0;
  std::optional<Disagreement> other_call_;  // the first post all_posted() found of another
  int seen_ = 0;                            // ranks below this one have posted the current exchange
  std::vector<const std::byte*> board_;     // every rank's, by rank
  std::vector<const std::byte*> parts_;
};

}  // namespace arcoll
