#include "src/core/boards.hpp"

#include <atomic>
#include <cstring>

namespace arcoll {
namespace {

constexpr std::size_t kLine = 64;

// At the board's start: the collective its owner is in, and the signature and root of its last
// two calls, by sequence number modulo 2. They are written first and read after the sequence,
// each way with ordering, so that a reader that sees a sequence number reads at least that
// call's entry.
struct CurrentCall {
  std::atomic<std::uint64_t> sequence;
  std::atomic<std::uint64_t> signature[2];
  std::atomic<std::int64_t> root[2];
};

// At a post's start, the part following in the same cache line: a part of up to 32 bytes
// arrives with its header in one line.
struct PostHeader {
  std::atomic<std::uint64_t> exchange;   // the owner's exchange number, written last
  std::atomic<std::uint64_t> signature;  // and collective sequence number of its call
  std::atomic<std::uint64_t> sequence;
};
constexpr std::size_t kPartOffset = 32;  // parts aligned for 32-byte vectors
static_assert(sizeof(PostHeader) <= kPartOffset);

const PostHeader* header(const std::byte* slot) {
  return reinterpret_cast<const PostHeader*>(slot);
}

// After the line of the current call, two posts of whole lines.
std::size_t post_bytes(std::size_t board_bytes) {
  return (board_bytes - kLine) / 2 / kLine * kLine;
}

}  // namespace

std::size_t CallBoards::capacity_of(std::size_t board_bytes) {
  return post_bytes(board_bytes) - kPartOffset;
}

CallBoards::CallBoards(SharedBoards& boards, int rank, int size)
    : boards_(boards),
      rank_(rank),
      size_(size),
      slot_bytes_(post_bytes(boards.board_bytes())),
      capacity_(capacity_of(boards.board_bytes())),
      board_(static_cast<std::size_t>(size)),
      parts_(static_cast<std::size_t>(size), nullptr) {
  // The segment starts zeroed: no call entered, no exchange posted.
  static_assert(sizeof(CurrentCall) <= kLine && sizeof(PostHeader) < kLine);
  for (int r = 0; r < size; ++r)
    board_[static_cast<std::size_t>(r)] = r == rank ? boards.own_board() : boards.board_of(r);
}

const std::byte* CallBoards::slot_of(int rank, std::uint64_t exchange) const {
  return board_[static_cast<std::size_t>(rank)] + kLine + (exchange % 2) * slot_bytes_;
}

void CallBoards::enter(std::uint64_t sequence, std::uint64_t signature, int root) {
  auto* current = reinterpret_cast<CurrentCall*>(boards_.own_board());
  current->signature[sequence % 2].store(signature, std::memory_order_release);
  current->root[sequence % 2].store(root, std::memory_order_release);
  current->sequence.store(sequence, std::memory_order_release);
  entered_sequence_ = sequence;
  entered_signature_ = signature;
  entered_root_ = root;
  entered_seen_ = 0;
}

int CallBoards::first_not_entered_alike(std::optional<Disagreement>& other, int& other_root) {
  const std::uint64_t n = entered_sequence_;
  for (; entered_seen_ < size_; ++entered_seen_) {
    const auto* current =
        reinterpret_cast<const CurrentCall*>(board_[static_cast<std::size_t>(entered_seen_)]);
    const std::uint64_t in = current->sequence.load(std::memory_order_acquire);
    if (in < n) return entered_seen_;
    const std::uint64_t theirs = current->signature[n % 2].load(std::memory_order_acquire);
    const auto root = static_cast<int>(current->root[n % 2].load(std::memory_order_acquire));
    // Two calls ahead cannot be (see the header); were it so, the entry read is not this call's.
    if (current->sequence.load(std::memory_order_acquire) > n + 1) continue;
    if (theirs != entered_signature_ || root != entered_root_) {
      other = Disagreement{entered_seen_, theirs, n, false};
      other_root = root;
      return entered_seen_;
    }
  }
  return -1;
}

void CallBoards::post(const void* data, std::size_t bytes, std::uint64_t sequence,
                      std::uint64_t signature) {
  ++exchange_;
  auto* slot = const_cast<std::byte*>(slot_of(rank_, exchange_));
  if (bytes != 0) std::memcpy(slot + kPartOffset, data, bytes);
  auto* h = reinterpret_cast<PostHeader*>(slot);
  h->signature.store(signature, std::memory_order_relaxed);
  h->sequence.store(sequence, std::memory_order_relaxed);
  h->exchange.store(exchange_, std::memory_order_release);
  sequence_ = sequence;
  signature_ = signature;
  seen_ = 0;
  other_call_.reset();
  boards_.announce_board();
}

bool CallBoards::all_posted() {
  for (; seen_ < size_; ++seen_) {
    const std::byte* slot = slot_of(seen_, exchange_);
    const PostHeader* h = header(slot);
    if (h->exchange.load(std::memory_order_acquire) != exchange_) return false;
    parts_[static_cast<std::size_t>(seen_)] = slot + kPartOffset;
    const std::uint64_t theirs = h->signature.load(std::memory_order_relaxed);
    const std::uint64_t in = h->sequence.load(std::memory_order_relaxed);
    if ((theirs != signature_ || in != sequence_) && !other_call_)
      other_call_ = Disagreement{seen_, theirs, in, true};
  }
  return true;
}

int CallBoards::first_missing() const {
  return seen_ < size_ ? seen_ : -1;
}

std::optional<CallBoards::Disagreement> CallBoards::disagreement() const {
  if (other_call_) return other_call_;  // a post all_posted() saw
  // The ranks not seen posted yet: where their boards say they are.
  for (int r = seen_; r < size_; ++r) {
    const PostHeader* h = header(slot_of(r, exchange_));
    const auto* current = reinterpret_cast<const CurrentCall*>(board_[static_cast<std::size_t>(r)]);
    const std::uint64_t in = current->sequence.load(std::memory_order_acquire);
    const std::uint64_t theirs = current->signature[in % 2].load(std::memory_order_acquire);
    if (in < sequence_ || (in == sequence_ && theirs == signature_)) continue;  // on its way
    // Another call at this step, or a later one reached without posting a part of this one.
    // Unless it posted meanwhile (then the signature read may be of its next call), or moved
    // on while we read (looked at again later).
    if (h->exchange.load(std::memory_order_acquire) == exchange_ ||
        current->sequence.load(std::memory_order_acquire) != in)
      continue;
    return Disagreement{r, theirs, in, false};
  }
  return std::nullopt;
}

}  // namespace arcoll
