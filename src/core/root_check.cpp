// The root check by messages, where the ranks share no boards (engine.hpp's post_root_check;
// the boards' check is in engine.cpp, beside the boards' exchange).
#include <algorithm>
#include <string>
#include <tuple>

#include "src/core/engine.hpp"

namespace arcoll {
namespace {

// The root check takes one step up to this many ranks, in calls up to this size a rank, where
// messages are cheap (Engine::post_root_check).
constexpr int kRootsFromEveryRank = 8;
constexpr std::size_t kRootsFromEveryRankBytes = 256 * 1024;

}  // namespace

void Engine::post_root_round(int round) {
  const int distance = 1 << round;
  const int to = (rank_ + distance) % size_, from = (rank_ + size_ - distance % size_) % size_;
  const std::uint32_t tag =
      tag_ | kCheckTagBit | static_cast<std::uint32_t>(round) << kChannelShift;
  roots_told_[static_cast<std::size_t>(round)] = roots_seen_;
  root_messages_.push_back(post(Request::Kind::send, to,
                                &roots_told_[static_cast<std::size_t>(round)], sizeof(RootsSeen),
                                tag, {}));
  root_messages_.push_back(
      post(Request::Kind::recv, from, roots_heard_.data(), sizeof(RootsSeen), tag, {}));
}

void Engine::post_root_check(int root, std::size_t bytes) {
  // Every rank's board says which call it entered, with which root: looked at by waits that
  // block meanwhile (ranks that each name themselves the root of a gather, or of a large
  // broadcast, wait for one another), and at the end.
  root_check_open_ = boards_ != nullptr;
  if (boards_) {
    // A peer may sleep in its own root check, waiting for this rank's entry: a call by
    // messages posts nothing on the boards that would wake it.
    boards_->shared().announce_board();
    return;
  }
  roots_seen_ = {root, rank_, root, rank_};
  root_messages_.clear();
  // In a small call, a check's send goes in one write with the call's own first message to
  // the peer, where a transport pays per write (tcp). 2 ranks over loopback, 8 B, medians of 3
  // interleaved runs: gather 23.3 -> 15.6 us, scatter 18.4 -> 14.9, broadcast 18.2 -> 15.2,
  // as fast as an all-reduce (15.1).
  holds_root_sends_ = bytes <= kRootsFromEveryRankBytes;
  roots_from_every_rank_ =
      cheap_messages_ && size_ <= kRootsFromEveryRank && bytes <= kRootsFromEveryRankBytes;
  if (!roots_from_every_rank_) {
    roots_told_.resize(32);
    roots_heard_.resize(1);
    return post_root_round(0);
  }
  // One step, its messages in flight beside the call's own, where messages are cheap
  // (Transport::small_messages_cheap): rounds wait on peers that may not have the core. On 4
  // ranks over UCX, 2 cores, a scatter of 64 KiB took 23.8 us with two rounds of
  // dissemination, 18.9 this way, 5 with no check (every rank then waits for the root only).
  // Over TCP each message costs a system call at both ends: on 8 ranks over loopback, a gather
  // of 1 KiB took 1.4 times as long this way. Larger calls keep the rounds, where the check
  // costs little beside them: in one step, a gather's senders wait for no message the root
  // sends once it has their data, and run a call ahead, and over UCX the root copies aside
  // what they send early (4 ranks, 2 cores, 4 MiB a rank: 13.0 against 1.3 ms).
  roots_heard_.resize(static_cast<std::size_t>(size_ - 1));
  const std::uint32_t tag = tag_ | kCheckTagBit;
  for (int distance = 1; distance < size_; ++distance) {
    const int to = (rank_ + distance) % size_, from = (rank_ + size_ - distance) % size_;
    root_messages_.push_back(
        post(Request::Kind::send, to, &roots_seen_, sizeof(RootsSeen), tag, {}));
    root_messages_.push_back(post(Request::Kind::recv, from,
                                  &roots_heard_[static_cast<std::size_t>(distance - 1)],
                                  sizeof(RootsSeen), tag, {}));
  }
}

void Engine::hear_roots() {
  for (const RequestPtr& message : root_messages_) wait(message);
  root_messages_.clear();
  // Ties go to the lower rank: every rank ends naming the same two.
  RootsSeen& s = roots_seen_;
  for (const RootsSeen& h : roots_heard_) {
    if (h.lowest < s.lowest || (h.lowest == s.lowest && h.lowest_by < s.lowest_by))
      std::tie(s.lowest, s.lowest_by) = std::pair(h.lowest, h.lowest_by);
    if (h.highest > s.highest || (h.highest == s.highest && h.highest_by < s.highest_by))
      std::tie(s.highest, s.highest_by) = std::pair(h.highest, h.highest_by);
  }
}

void Engine::finish_root_check() {
  if (boards_) return finish_root_check_on_boards();
  hear_roots();
  for (int round = 1; !roots_from_every_rank_ && (1 << round) < size_; ++round) {
    post_root_round(round);
    hear_roots();
  }
  const RootsSeen& s = roots_seen_;
  if (s.lowest != s.highest)
    throw InvalidArgument(call_name(),
                          "call mismatch: rank " + std::to_string(s.lowest_by) + " names root " +
                              std::to_string(s.lowest) + " where rank " +
                              std::to_string(s.highest_by) + " names root " +
                              std::to_string(s.highest) + ": every rank must name the same root",
                          rank_, s.lowest_by == rank_ ? s.highest_by : s.lowest_by);
}

}  // namespace arcoll
