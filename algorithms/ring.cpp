// Ring algorithms: all-reduce as a reduce-scatter and an all-gather around the ring
// (bandwidth-optimal: each rank sends 2(p-1)/p of the data); reduce as the reduce-scatter and
// a gather to the root; broadcast as a pipelined chain.
#include "algorithms/ring.hpp"

#include <algorithm>
#include <deque>

#include "algorithms/cost_model.hpp"
#include "algorithms/group.hpp"

namespace arcoll::ring {
namespace {

// Reduce-scatter keeps this many receives posted ahead of the one it waits for.
constexpr std::size_t kRecvAhead = 4;

int wrap(int value, int p) {
  return ((value % p) + p) % p;
}

// One chunk of a segment moved at one step of the ring.
struct ChunkStep {
  int step;
  int segment;
  std::size_t offset;  // elements from the start of the segment
  std::size_t count;
};

// What both passes share: the neighbours and the chunking of segments.
class RingPass : public Pass {
 protected:
  RingPass(PointToPoint& p2p, const Segments& segments, DataType type, int channel)
      : p2p_(p2p),
        segments_(segments),
        type_(type),
        elem_(size_of(type)),
        rank_(p2p.rank()),
        size_(p2p.size()),
        left_(wrap(rank_ - 1, size_)),
        right_(wrap(rank_ + 1, size_)),
        channel_(channel),
        chunk_elems_(std::max<std::size_t>(1, p2p.chunk_bytes() / elem_)) {}

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
  std::size_t byte_offset(const ChunkStep& c) const {
    return (segments_.begin(c.segment) + c.offset) * elem_;
  }
  void send_right(const void* data, const ChunkStep& c) {
    sends_.push_back(p2p_.isend(right_, data, c.count * elem_, channel_));
  }
  // Waits for the sends once every chunk has been received; false from then on.
  bool finish() {
    p2p_.wait_all(sends_);
    sends_.clear();
    return false;
  }

  PointToPoint& p2p_;
  Segments segments_;
  DataType type_;
  std::size_t elem_;
  int rank_, size_, left_, right_, channel_;
  std::size_t chunk_elems_;
  std::vector<ChunkStep> incoming_;
  std::size_t next_ = 0;  // index in incoming_ of the chunk to complete next
  std::vector<RequestPtr> sends_;
};

// At step k a rank sends segment rank-k-1 and receives segment rank-k-2, reducing its own
// input into it as it lands; a few receives are posted ahead so that the next chunk is in
// flight while one is reduced.
class ReduceScatterPass final : public RingPass {
 public:
  ReduceScatterPass(PointToPoint& p2p, const Segments& segments, DataType type, ReduceOp op,
                    const char* input, SegmentOut segment_out, int channel)
      : RingPass(p2p, segments, type, channel),
        op_(op),
        input_(input),
        segment_out_(std::move(segment_out)) {
    for (int k = 0; k < size_ - 1; ++k) append_chunks(incoming_, k, wrap(rank_ - k - 2, size_));
    for (const ChunkStep& c : chunks(0, wrap(rank_ - 1, size_))) send_right(input_ + byte_offset(c), c);
    for (std::size_t i = 0; i < std::min(kRecvAhead, incoming_.size()); ++i) post(i);
  }

  bool advance() override {
    if (next_ == incoming_.size()) return finish();
    const ChunkStep& c = incoming_[next_];
    p2p_.wait(recvs_.front());
    recvs_.pop_front();
    if (c.step + 1 < size_ - 1) send_right(out(c), c);
    if (next_ + kRecvAhead < incoming_.size()) post(next_ + kRecvAhead);
    ++next_;
    return true;
  }

 private:
  char* out(const ChunkStep& c) const { return segment_out_(c.segment) + c.offset * elem_; }
  void post(std::size_t i) {
    const ChunkStep& c = incoming_[i];
    recvs_.push_back(p2p_.irecv_reduce(left_, out(c), input_ + byte_offset(c), c.count, type_, op_,
                                       channel_));
  }

  ReduceOp op_;
  const char* input_;
  SegmentOut segment_out_;
  std::deque<RequestPtr> recvs_;
};

// At step t a rank sends segment rank-t and receives segment rank-t-1 straight into place.
class AllgatherPass final : public RingPass {
 public:
  AllgatherPass(PointToPoint& p2p, const Segments& segments, DataType type, char* buffer,
                int channel)
      : RingPass(p2p, segments, type, channel), buffer_(buffer) {
    for (int t = 0; t < size_ - 1; ++t) append_chunks(incoming_, t, wrap(rank_ - t - 1, size_));
    for (const ChunkStep& c : incoming_)
      recvs_.push_back(p2p_.irecv(left_, buffer_ + byte_offset(c), c.count * elem_, channel_));
    for (const ChunkStep& c : chunks(0, rank_)) send_right(buffer_ + byte_offset(c), c);
  }

  bool advance() override {
    if (next_ == incoming_.size()) return finish();
    const ChunkStep& c = incoming_[next_];
    p2p_.wait(recvs_[next_]);
    if (c.step + 1 < size_ - 1) send_right(buffer_ + byte_offset(c), c);
    ++next_;
    return true;
  }

 private:
  char* buffer_;
  std::vector<RequestPtr> recvs_;
};

class AllreducePass final : public Pass {
 public:
  AllreducePass(PointToPoint& p2p, std::size_t count, DataType type, ReduceOp op,
                const char* input, char* output, int channel)
      : p2p_(p2p),
        segments_(Segments::balanced(count, p2p.size())),
        type_(type),
        output_(output),
        channel_(channel) {
    const std::size_t elem = size_of(type);
    if (p2p.size() == 1 || count == 0) {
      p2p.copy(output, input, count * elem);
      return;
    }
    stage_ = reduce_scatter(
        p2p, segments_, type, op, input,
        [this, elem](int s) { return output_ + segments_.begin(s) * elem; }, channel);
    gather_next_ = true;
  }

  bool advance() override {
    if (stage_ && stage_->advance()) return true;
    if (!gather_next_) return false;
    gather_next_ = false;
    stage_ = allgather(p2p_, segments_, type_, output_, channel_);
    return true;
  }

 private:
  PointToPoint& p2p_;
  Segments segments_;
  DataType type_;
  char* output_;
  int channel_;
  std::unique_ptr<Pass> stage_;
  bool gather_next_ = false;
};

}  // namespace

Segments Segments::balanced(std::size_t count, int p) {
  Segments s;
  const auto parts = static_cast<std::size_t>(p);
  for (std::size_t i = 0; i <= parts; ++i)
    s.offset.push_back(i * (count / parts) + std::min(i, count % parts));
  return s;
}

Segments Segments::uniform(std::size_t block, int p) {
  Segments s;
  for (std::size_t i = 0; i <= static_cast<std::size_t>(p); ++i) s.offset.push_back(i * block);
  return s;
}

std::unique_ptr<Pass> reduce_scatter(PointToPoint& p2p, const Segments& segments, DataType type,
                                     ReduceOp op, const char* input, SegmentOut segment_out,
                                     int channel) {
  return std::make_unique<ReduceScatterPass>(p2p, segments, type, op, input,
                                             std::move(segment_out), channel);
}

std::unique_ptr<Pass> allgather(PointToPoint& p2p, const Segments& segments, DataType type,
                                char* buffer, int channel) {
  return std::make_unique<AllgatherPass>(p2p, segments, type, buffer, channel);
}

std::unique_ptr<Pass> allreduce(PointToPoint& p2p, std::size_t count, DataType type, ReduceOp op,
                                const char* input, char* output, int channel) {
  return std::make_unique<AllreducePass>(p2p, count, type, op, input, output, channel);
}

std::vector<int> host_order(const PointToPoint& p2p) {
  std::vector<int> order(static_cast<std::size_t>(p2p.size()));
  for (int r = 0; r < p2p.size(); ++r) order[static_cast<std::size_t>(r)] = r;
  // Ranks of one host adjacent, and within a host those of one NUMA node: the ring then
  // crosses each host boundary and each NUMA boundary once per direction.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::pair(p2p.node_of(a), p2p.numa_of(a)) < std::pair(p2p.node_of(b), p2p.numa_of(b));
  });
  return order;
}

void run_together(std::vector<std::unique_ptr<Pass>>& passes) {
  bool any = true;
  while (any) {
    any = false;
    for (auto& pass : passes) any = pass->advance() || any;
  }
}

namespace {

// The p - 1 steps of a ring, each moving a segment of bytes/p chunk-pipelined (and reducing it).
double steps_cost(int ranks, double bytes, const LinkCost& link, std::size_t chunk_bytes,
                  bool reduced) {
  if (ranks <= 1) return 0;
  const double p = ranks;
  const double segment = bytes / p;
  return (p - 1) * (cost::chunks_of(segment, chunk_bytes) * link.alpha +
                    segment * (link.beta + (reduced ? link.gamma : 0)));
}

}  // namespace

double allreduce_cost(int ranks, double bytes, const LinkCost& link,
                      std::size_t chunk_bytes) {
  if (ranks <= 1 || bytes <= 0) return 0;
  return steps_cost(ranks, bytes, link, chunk_bytes, /*reduced=*/true) +
         steps_cost(ranks, bytes, link, chunk_bytes, /*reduced=*/false);
}

namespace {

void ring_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  GroupView ring(p2p, host_order(p2p));
  allreduce(ring, a.count, a.type, a.op, static_cast<const char*>(a.send),
            static_cast<char*>(a.recv))
      ->run();
}

void ring_reduce_scatter(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t elem = size_of(a.type);
  const char* in = static_cast<const char*>(a.send);
  if (p2p.size() == 1 || a.count == 0) {
    p2p.copy(a.recv, in + static_cast<std::size_t>(p2p.rank()) * a.count * elem, a.count * elem);
    return;
  }
  const Segments segments = Segments::uniform(a.count, p2p.size());
  // Partial results of other ranks' segments pass through scratch, never the input.
  char* work = static_cast<char*>(p2p.scratch(segments.offset.back() * elem, 1));
  reduce_scatter(p2p, segments, a.type, a.op, in,
                 [&](int s) {
                   return s == p2p.rank() ? static_cast<char*>(a.recv)
                                          : work + segments.begin(s) * elem;
                 })
      ->run();
}

void ring_allgather(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t elem = size_of(a.type);
  char* out = static_cast<char*>(a.recv);
  p2p.copy(out + static_cast<std::size_t>(p2p.rank()) * a.count * elem, a.send, a.count * elem);
  if (p2p.size() == 1 || a.count == 0) return;
  allgather(p2p, Segments::uniform(a.count, p2p.size()), a.type, out)->run();
}

// Reduce to the root: the ring's reduce-scatter, then every rank sends the segment it finished
// to the root, which so receives (p-1)/p of the data once, as the bandwidth bound asks.
void ring_reduce(PointToPoint& p2p, const CollectiveArgs& a) {
  const std::size_t elem = size_of(a.type);
  const int p = p2p.size(), rank = p2p.rank();
  const bool root = rank == a.root;
  if (p == 1 || a.count == 0) {
    if (root) p2p.copy(a.recv, a.send, a.count * elem);
    return;
  }
  const Segments segments = Segments::balanced(a.count, p);
  char* out = root ? static_cast<char*>(a.recv) : static_cast<char*>(p2p.scratch(a.count * elem, 1));
  reduce_scatter(p2p, segments, a.type, a.op, static_cast<const char*>(a.send),
                 [&](int s) { return out + segments.begin(s) * elem; })
      ->run();
  if (!root) {
    p2p.wait(p2p.isend(a.root, out + segments.begin(rank) * elem, segments.count(rank) * elem));
    return;
  }
  std::vector<RequestPtr> receives;
  for (int r = 0; r < p; ++r)
    if (r != rank)
      receives.push_back(
          p2p.irecv(r, out + segments.begin(r) * elem, segments.count(r) * elem));
  p2p.wait_all(receives);
}

// Pipelined chain from `root` around the ring.
void chain_broadcast(PointToPoint& p2p, const CollectiveArgs& a) {
  const int p = p2p.size();
  if (p == 1 || a.count == 0) return;
  const std::size_t elem = size_of(a.type);
  const std::size_t chunk = std::max<std::size_t>(1, p2p.chunk_bytes() / elem);
  const int position = wrap(p2p.rank() - a.root, p);
  char* buffer = static_cast<char*>(a.recv);
  auto bytes_from = [&](std::size_t off) { return std::min(chunk, a.count - off) * elem; };
  // Every chunk's receive is posted before the first is waited for, so that chunks arriving
  // while this rank forwards land in place rather than being held and copied.
  std::vector<RequestPtr> receives, sends;
  if (position != 0)
    for (std::size_t off = 0; off < a.count; off += chunk)
      receives.push_back(p2p.irecv(wrap(p2p.rank() - 1, p), buffer + off * elem, bytes_from(off)));
  for (std::size_t off = 0, i = 0; off < a.count; off += chunk, ++i) {
    if (position != 0) p2p.wait(receives[i]);
    if (position != p - 1)
      sends.push_back(p2p.isend(wrap(p2p.rank() + 1, p), buffer + off * elem, bytes_from(off)));
  }
  p2p.wait_all(sends);
}

// m chunks down a chain of p ranks: m + p - 2 steps of one chunk each.
double chain_broadcast_cost(const CostQuery& q) {
  if (q.layout.ranks <= 1) return 0;
  const LinkCost& link = q.layout.flat();
  const double chunks = cost::chunks_of(q.bytes, q.layout.chunk_bytes);
  return (chunks + q.layout.ranks - 2) * (link.alpha + q.bytes / chunks * link.beta);
}

// The reduce-scatter, then every segment to the root at once: (p-1)/p of the buffer into it.
double reduce_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  const double p = l.ranks;
  return steps_cost(l.ranks, q.bytes, l.flat(), l.chunk_bytes, /*reduced=*/true) +
         l.flat().alpha + (p - 1) / p * q.bytes * l.flat().beta;
}

const AlgorithmRegistrar kRing{AlgorithmInfo{
    "ring",
    "reduce-scatter + all-gather around the ring, chunk-pipelined; reduce as its reduce-scatter "
    "and a gather; broadcast as a chain",
    {{Collective::allreduce, ring_allreduce},
     {Collective::reduce_scatter, ring_reduce_scatter},
     {Collective::allgather, ring_allgather},
     {Collective::broadcast, chain_broadcast},
     {Collective::reduce, ring_reduce}},
    {{Collective::allreduce,
      [](const CostQuery& q) {
        return allreduce_cost(q.layout.ranks, q.bytes, q.layout.flat(), q.layout.chunk_bytes);
      }},
     {Collective::reduce_scatter,
      [](const CostQuery& q) {
        return steps_cost(q.layout.ranks, q.bytes, q.layout.flat(), q.layout.chunk_bytes, true);
      }},
     {Collective::allgather,
      [](const CostQuery& q) {
        return steps_cost(q.layout.ranks, q.bytes, q.layout.flat(), q.layout.chunk_bytes, false);
      }},
     {Collective::broadcast, chain_broadcast_cost},
     {Collective::reduce, reduce_cost}}}};

}  // namespace
}  // namespace arcoll::ring
