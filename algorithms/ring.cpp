// Ring algorithms: reduce-scatter and all-gather around the ring of ranks, pipelined in
// chunks so that sending, receiving and reducing overlap; all-reduce is the two in a row
// (bandwidth-optimal: each rank sends 2(p-1)/p of the data). Broadcast is a pipelined chain.
#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <vector>

#include "algorithms/algorithm.hpp"
#include "src/reduce.hpp"

namespace arcoll {
namespace {

// Reduce-scatter keeps this many receives posted ahead of the one it waits for.
constexpr std::size_t kRecvAhead = 4;

int wrap(int value, int p) {
  return ((value % p) + p) % p;
}

// Where each rank's segment lies, in elements.
struct Segments {
  std::vector<std::size_t> offset;  // p + 1 entries
  std::size_t begin(int s) const { return offset[static_cast<std::size_t>(s)]; }
  std::size_t count(int s) const {
    return offset[static_cast<std::size_t>(s) + 1] - offset[static_cast<std::size_t>(s)];
  }
  // `count` elements split as evenly as possible (the first count % p segments get one more).
  static Segments balanced(std::size_t count, int p) {
    Segments s;
    const auto parts = static_cast<std::size_t>(p);
    for (std::size_t i = 0; i <= parts; ++i)
      s.offset.push_back(i * (count / parts) + std::min(i, count % parts));
    return s;
  }
  static Segments uniform(std::size_t block, int p) {
    Segments s;
    for (std::size_t i = 0; i <= static_cast<std::size_t>(p); ++i) s.offset.push_back(i * block);
    return s;
  }
};

// One chunk of a segment moved at one step of the ring.
struct ChunkStep {
  int step;
  int segment;
  std::size_t offset;  // elements from the start of the segment
  std::size_t count;
};

class Ring {
 public:
  Ring(PointToPoint& p2p, const Segments& segments, DataType type)
      : p2p_(p2p),
        segments_(segments),
        type_(type),
        elem_(size_of(type)),
        rank_(p2p.rank()),
        size_(p2p.size()),
        left_(wrap(rank_ - 1, size_)),
        right_(wrap(rank_ + 1, size_)),
        chunk_elems_(std::max<std::size_t>(1, p2p.chunk_bytes() / elem_)) {}

  // After it, segment `rank` of the reduction is at segment_out(rank). At step k a rank
  // sends segment rank-k-1 and receives segment rank-k-2, reducing its own input into it.
  void reduce_scatter(const char* input, const std::function<char*(int)>& segment_out,
                      ReduceOp op) {
    std::vector<ChunkStep> incoming;
    for (int k = 0; k < size_ - 1; ++k) append_chunks(incoming, k, wrap(rank_ - k - 2, size_));
    std::vector<RequestPtr> sends;
    for (const ChunkStep& c : chunks(0, wrap(rank_ - 1, size_)))
      sends.push_back(p2p_.isend(right_, input + (segments_.begin(c.segment) + c.offset) * elem_,
                                 c.count * elem_));
    // Each chunk is reduced as it is received, into its place in the output; a few are
    // posted ahead so that the next is in flight while one is reduced.
    std::deque<RequestPtr> recvs;
    auto post = [&](std::size_t i) {
      const ChunkStep& c = incoming[i];
      recvs.push_back(p2p_.irecv_reduce(left_, segment_out(c.segment) + c.offset * elem_,
                                        input + (segments_.begin(c.segment) + c.offset) * elem_,
                                        c.count, type_, op));
    };
    for (std::size_t i = 0; i < std::min(kRecvAhead, incoming.size()); ++i) post(i);
    for (std::size_t i = 0; i < incoming.size(); ++i) {
      const ChunkStep& c = incoming[i];
      p2p_.wait(recvs.front());
      recvs.pop_front();
      if (c.step + 1 < size_ - 1)
        sends.push_back(
            p2p_.isend(right_, segment_out(c.segment) + c.offset * elem_, c.count * elem_));
      if (i + kRecvAhead < incoming.size()) post(i + kRecvAhead);
    }
    p2p_.wait_all(sends);
  }

  // Segment `rank` is in place in `buffer`; fills in every other segment. At step t a rank
  // sends segment rank-t and receives segment rank-t-1 straight into place.
  void allgather(char* buffer) {
    std::vector<ChunkStep> incoming;
    for (int t = 0; t < size_ - 1; ++t) append_chunks(incoming, t, wrap(rank_ - t - 1, size_));
    std::vector<RequestPtr> recvs;
    for (const ChunkStep& c : incoming)
      recvs.push_back(p2p_.irecv(left_, at(buffer, c), c.count * elem_));
    std::vector<RequestPtr> sends;
    for (const ChunkStep& c : chunks(0, rank_))
      sends.push_back(p2p_.isend(right_, at(buffer, c), c.count * elem_));
    for (std::size_t i = 0; i < incoming.size(); ++i) {
      p2p_.wait(recvs[i]);
      const ChunkStep& c = incoming[i];
      if (c.step + 1 < size_ - 1)
        sends.push_back(p2p_.isend(right_, at(buffer, c), c.count * elem_));
    }
    p2p_.wait_all(sends);
  }

  // Pipelined chain from `root` around the ring; the whole buffer is one segment.
  void broadcast(char* buffer, std::size_t count, int root) {
    const int position = wrap(rank_ - root, size_);
    std::vector<RequestPtr> sends;
    for (std::size_t off = 0; off < count; off += chunk_elems_) {
      const std::size_t n = std::min(chunk_elems_, count - off);
      if (position != 0) p2p_.wait(p2p_.irecv(left_, buffer + off * elem_, n * elem_));
      if (position != size_ - 1)
        sends.push_back(p2p_.isend(right_, buffer + off * elem_, n * elem_));
    }
    p2p_.wait_all(sends);
  }

 private:
  std::vector<ChunkStep> chunks(int step, int segment) const {
    std::vector<ChunkStep> out;
    append_chunks(out, step, segment);
    return out;
  }
  void append_chunks(std::vector<ChunkStep>& out, int step, int segment) const {
    const std::size_t n = segments_.count(segment);
    for (std::size_t off = 0; off < n; off += chunk_elems_)
      out.push_back({step, segment, off, std::min(chunk_elems_, n - off)});
  }
  char* at(char* buffer, const ChunkStep& c) const {
    return buffer + (segments_.begin(c.segment) + c.offset) * elem_;
  }

  PointToPoint& p2p_;
  const Segments& segments_;
  DataType type_;
  std::size_t elem_;
  int rank_, size_, left_, right_;
  std::size_t chunk_elems_;
};

void copy_if_distinct(void* dst, const void* src, std::size_t bytes) {
  if (dst != src && bytes != 0) std::memmove(dst, src, bytes);
}

void ring_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t elem = size_of(a.type);
  if (p2p.size() == 1 || a.count == 0) {
    copy_if_distinct(a.recv, a.send, a.count * elem);
    return;
  }
  const Segments segments = Segments::balanced(a.count, p2p.size());
  Ring ring(p2p, segments, a.type);
  char* out = static_cast<char*>(a.recv);
  ring.reduce_scatter(
      static_cast<const char*>(a.send), [&](int s) { return out + segments.begin(s) * elem; },
      a.op);
  ring.allgather(out);
}

void ring_reduce_scatter(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t elem = size_of(a.type);
  const char* in = static_cast<const char*>(a.send);
  if (p2p.size() == 1 || a.count == 0) {
    copy_if_distinct(a.recv, in + static_cast<std::size_t>(p2p.rank()) * a.count * elem,
                     a.count * elem);
    return;
  }
  const Segments segments = Segments::uniform(a.count, p2p.size());
  // Partial results of other ranks' segments pass through scratch, never the input.
  char* work = static_cast<char*>(p2p.scratch(segments.offset.back() * elem, 1));
  Ring ring(p2p, segments, a.type);
  ring.reduce_scatter(
      in,
      [&](int s) {
        return s == p2p.rank() ? static_cast<char*>(a.recv) : work + segments.begin(s) * elem;
      },
      a.op);
}

void ring_allgather(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t elem = size_of(a.type);
  char* out = static_cast<char*>(a.recv);
  copy_if_distinct(out + static_cast<std::size_t>(p2p.rank()) * a.count * elem, a.send,
                   a.count * elem);
  if (p2p.size() == 1 || a.count == 0) return;
  const Segments segments = Segments::uniform(a.count, p2p.size());
  Ring(p2p, segments, a.type).allgather(out);
}

void chain_broadcast(PointToPoint& p2p, const CollectiveArgs& a) {
  if (p2p.size() == 1 || a.count == 0) return;
  const Segments whole = Segments::uniform(a.count, 1);
  Ring(p2p, whole, a.type).broadcast(static_cast<char*>(a.recv), a.count, a.root);
}

const AlgorithmRegistrar kRing{AlgorithmInfo{
    "ring",
    "reduce-scatter + all-gather around the ring, chunk-pipelined; broadcast as a chain",
    {{Collective::allreduce, ring_allreduce},
     {Collective::reduce_scatter, ring_reduce_scatter},
     {Collective::allgather, ring_allgather},
     {Collective::broadcast, chain_broadcast}}}};

}  // namespace
}  // namespace arcoll
