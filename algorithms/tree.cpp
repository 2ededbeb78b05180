// Double binary tree all-reduce, in the manner NCCL introduced it: half of the buffer is
// reduced up one binary tree and broadcast back down it, the other half on a second tree in
// which the leaves of the first are inner nodes, so that every rank sends and receives about
// as much as in a ring while the depth is only log2(p). Both halves are pipelined in chunks,
// up and down at once, each tree on its own channel.
//
// Tree shape: ranks are placed at in-order positions v = 1..p of a binary tree whose node v
// sits at height ctz(v) (odd positions are leaves). The first tree puts rank r at r + 1; the
// second mirrors it (p even) or shifts it by one (p odd), turning leaves into inner nodes.
#include <algorithm>
#include <bit>
#include <deque>

#include "algorithms/algorithm.hpp"
#include "algorithms/cost_model.hpp"

namespace arcoll {
namespace {

// Receives reducing a child's chunk are posted this many chunks ahead.
constexpr std::size_t kReduceAhead = 4;

struct TreeLinks {
  int parent = -1;
  std::vector<int> children;
};

TreeLinks links_of(int rank, int p, int tree) {
  auto position = [&](int r) {
    if (tree == 0) return r + 1;
    return p % 2 == 0 ? p - r : (r + 1) % p + 1;
  };
  std::vector<int> rank_at(static_cast<std::size_t>(p) + 1);
  for (int r = 0; r < p; ++r) rank_at[static_cast<std::size_t>(position(r))] = r;
  // Children of position v: v - 2^(h-1) and the highest v + 2^j <= p with j < h.
  auto children_of = [&](int v) {
    std::vector<int> out;
    const int h = std::countr_zero(static_cast<unsigned>(v));
    if (h == 0) return out;
    out.push_back(v - (1 << (h - 1)));
    for (int j = h - 1; j >= 0; --j)
      if (v + (1 << j) <= p) {
        out.push_back(v + (1 << j));
        break;
      }
    return out;
  };
  TreeLinks links;
  const int me = position(rank);
  for (int v : children_of(me)) links.children.push_back(rank_at[static_cast<std::size_t>(v)]);
  for (int v = 1; v <= p && links.parent < 0; ++v) {
    const auto c = children_of(v);
    if (std::find(c.begin(), c.end(), me) != c.end())
      links.parent = rank_at[static_cast<std::size_t>(v)];
  }
  return links;
}

// One tree's half of the buffer, advanced one chunk of the upward reduction at a time; the
// downward broadcast forwards chunks as they arrive.
class TreePass {
 public:
  TreePass(PointToPoint& p2p, int tree, const char* input, char* data, std::size_t count,
           DataType type, ReduceOp op)
      : p2p_(p2p),
        links_(links_of(p2p.rank(), p2p.size(), tree)),
        channel_(tree),
        input_(input),
        data_(data),
        count_(count),
        type_(type),
        op_(op),
        elem_(size_of(type)),
        chunk_(std::max<std::size_t>(1, p2p.chunk_bytes() / elem_)),
        chunks_((count + chunk_ - 1) / chunk_) {
    if (links_.parent >= 0)
      for (std::size_t j = 0; j < chunks_; ++j)
        down_.push_back(p2p_.irecv(links_.parent, at(j), length(j) * elem_, channel_));
    for (std::size_t j = 0; j < std::min(kReduceAhead, chunks_); ++j) post_reduces(j);
  }

  bool advance() {
    if (up_ < chunks_) {
      for (std::size_t i = 0; i < links_.children.size(); ++i) {
        p2p_.wait(reduces_.front());
        reduces_.pop_front();
      }
      if (links_.parent >= 0)
        sends_.push_back(p2p_.isend(links_.parent, partial(up_), length(up_) * elem_, channel_));
      else
        forward_down(up_);
      if (up_ + kReduceAhead < chunks_) post_reduces(up_ + kReduceAhead);
      ++up_;
      if (links_.parent < 0) down_next_ = up_;
      // Chunks that came down meanwhile go on down without waiting (wait() only finishes them).
      while (down_next_ < up_ && down_[down_next_]->done) {
        p2p_.wait(down_[down_next_]);
        forward_down(down_next_++);
      }
      return true;
    }
    if (down_next_ < chunks_) {
      p2p_.wait(down_[down_next_]);
      forward_down(down_next_++);
      return true;
    }
    p2p_.wait_all(sends_);
    sends_.clear();
    return false;
  }

 private:
  char* at(std::size_t j) const { return data_ + j * chunk_ * elem_; }
  std::size_t length(std::size_t j) const { return std::min(chunk_, count_ - j * chunk_); }
  // This rank's partial result of chunk j: a leaf sends its input as it is.
  const char* partial(std::size_t j) const {
    return links_.children.empty() ? input_ + j * chunk_ * elem_ : at(j);
  }
  void post_reduces(std::size_t j) {
    // Children reduce into the output, which starts as the input: copied chunk by chunk, just
    // before it is needed (and while it is in cache), not all at once up front.
    if (!links_.children.empty() && input_ != data_)
      p2p_.copy(at(j), input_ + j * chunk_ * elem_, length(j) * elem_);
    for (int child : links_.children)
      reduces_.push_back(
          p2p_.irecv_reduce(child, at(j), at(j), length(j), type_, op_, channel_));
  }
  void forward_down(std::size_t j) {
    for (int child : links_.children)
      sends_.push_back(p2p_.isend(child, at(j), length(j) * elem_, channel_));
  }

  PointToPoint& p2p_;
  TreeLinks links_;
  int channel_;
  const char* input_;
  char* data_;
  std::size_t count_;
  DataType type_;
  ReduceOp op_;
  std::size_t elem_, chunk_, chunks_;
  std::deque<RequestPtr> reduces_;
  std::vector<RequestPtr> down_;
  std::vector<RequestPtr> sends_;
  std::size_t up_ = 0;         // next chunk to reduce and send up
  std::size_t down_next_ = 0;  // next chunk to forward down
};

void tree_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  if (allreduce_is_local(p2p, a)) return;
  const std::size_t elem = size_of(a.type);
  const auto* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  const std::size_t half = a.count / 2;
  TreePass first(p2p, 0, in, out, half, a.type, a.op);
  TreePass second(p2p, 1, in + half * elem, out + half * elem, a.count - half, a.type, a.op);
  bool more = true;
  while (more) {
    more = first.advance();
    more = second.advance() || more;
  }
}

// Per tree m chunks go up and down a tree of height d: m + 2d - 1 pipeline steps, in each of
// which a rank moves about 4 chunks (2 with only two ranks) and reduces 2.
double tree_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1 || q.bytes <= 0) return 0;
  const LinkCost link = cost::exchange_link(l, l.ranks);
  const double half = q.bytes / 2;
  const double chunks = cost::chunks_of(half, q.chunk_bytes);
  const double chunk = half / chunks;
  const double moved_per_step = (l.ranks == 2 ? 2 : 4) * chunk;
  const double steps = chunks + 2 * cost::floor_log2(l.ranks) - 1;
  return steps * (link.alpha + moved_per_step * link.beta + 2 * chunk * link.gamma);
}

const AlgorithmRegistrar kTree{AlgorithmInfo{
    "tree",
    "double binary tree: each half of the buffer reduced up and broadcast down its own tree, "
    "chunk-pipelined",
    {{Collective::allreduce, tree_allreduce}},
    {{Collective::allreduce, tree_cost}},
    /*chunked=*/true}};

}  // namespace
}  // namespace arcoll
