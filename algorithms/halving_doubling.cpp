// Recursive halving-doubling all-reduce (Rabenseifner): a reduce-scatter by recursive halving
// (round k: keep half of the current range, send the other half to rank ^ 2^(K-k), reduce
// what comes back), then an all-gather by recursive doubling in the reverse order. 2 log2(p)
// messages and the ring's 2(p-1)/p of the data: between recursive doubling (small) and the
// ring (large). Extra ranks of non-power-of-two worlds are folded in and out. The last halving
// round and the first doubling round have the same partner and run as one where that saves
// time: each reduced chunk goes back as it is reduced (irecv_reduce_send), so the transport
// writes the result for the partner while it is in cache instead of reading it again.
// Reduce runs the halving rounds, then sends each reduced chunk of the last to the root.
#include <array>
#include <utility>

#include "algorithms/cost_model.hpp"
#include "algorithms/fold.hpp"

namespace arcoll {
namespace {

struct Range {
  std::size_t begin, end;  // elements
  std::size_t count() const { return end - begin; }
};

// The halves of `range` that virtual rank `me` keeps and gives in the halving round of
// distance `mask`: the lower half goes to the rank whose bit `mask` is clear.
std::pair<Range, Range> split(const Range& range, int me, int mask) {
  const std::size_t middle = range.begin + (range.end - range.begin) / 2;
  const Range lower{range.begin, middle}, upper{middle, range.end};
  return (me & mask) == 0 ? std::pair{lower, upper} : std::pair{upper, lower};
}

// The last halving round with `partner`: `give` goes out on channel 0 while the kept half comes
// in and is reduced into `keep` (with `with`), and each reduced piece of it goes on channel 1
// to `result_to` (-1: it stays here). With `theirs`, what the partner sends on channel 1 lands
// there. All-reduce: the result goes back to the partner, whose reduced half lands in `theirs`
// (where `give` was read from when in place: the partner reduces each piece of it before it
// returns it), the last halving round and the first doubling round run as one. Reduce: the
// result goes to the root as it is reduced.
struct LastRound {
  int partner = 0;
  const char* give = nullptr;
  std::size_t give_count = 0;
  char* keep = nullptr;
  const char* with = nullptr;
  std::size_t keep_count = 0;
  int result_to = -1;
  char* theirs = nullptr;
};

// Message `k` of `bytes` cut into chunks: its offset and length.
std::pair<std::size_t, std::size_t> cut(std::size_t bytes, std::size_t chunk, std::size_t k) {
  const std::size_t offset = k * chunk;
  return {offset, std::min(chunk, bytes - offset)};
}
// Messages of `bytes` cut into chunks: at least one, also of no bytes.
std::size_t messages_of(std::size_t bytes, std::size_t chunk) {
  return std::max<std::size_t>(1, (bytes + chunk - 1) / chunk);
}

// Chunks of the pipeline size, at least one message each way. A single message each way goes
// on at once: no wait between the rounds. Several are either all given at once, or paced one
// at a time as the partner's returns come (PointToPoint::pace_returns: always on buffers
// larger than the caches, else whichever this rank timed faster). Both ways send the same
// messages on the same channels, so ranks may decide differently.
void last_halving_round(PointToPoint& p2p, const LastRound& r, DataType type, ReduceOp op) {
  const std::size_t elem = size_of(type);
  const std::size_t chunk = chunk_in_elements(p2p, elem);
  const std::size_t keep_bytes = r.keep_count * elem, give_bytes = r.give_count * elem;
  const bool returns = r.result_to == r.partner;
  if (keep_bytes <= chunk && give_bytes <= chunk) {
    // One message each way, as small exchanges are: nothing to allocate. Receives first, so
    // that messages land where they go instead of being held aside.
    std::array<RequestPtr, 3> requests{
        returns ? p2p.irecv_reduce_send(r.partner, r.keep, r.with, r.keep_count, type, op, 0, 1)
                : p2p.irecv_reduce(r.partner, r.keep, r.with, r.keep_count, type, op, 0),
        r.theirs != nullptr ? p2p.irecv(r.partner, r.theirs, give_bytes, 1) : nullptr,
        p2p.isend(r.partner, r.give, give_bytes, 0)};
    p2p.wait(requests[0]);
    if (r.result_to >= 0 && !returns) requests[0] = p2p.isend(r.result_to, r.keep, keep_bytes, 1);
    for (const RequestPtr& request : requests)
      if (request) p2p.wait(request);
    return;
  }
  // Paced returns to the partner are written on by the transport as they are reduced.
  const bool paced = p2p.pace_returns();
  const bool written_on = paced && returns;
  const std::size_t reduced = messages_of(keep_bytes, chunk), gives = messages_of(give_bytes, chunk);
  std::vector<RequestPtr> requests;
  requests.reserve(2 * reduced + 2 * gives);
  for (std::size_t k = 0; k < reduced; ++k) {
    const auto [offset, n] = cut(keep_bytes, chunk, k);
    requests.push_back(
        written_on ? p2p.irecv_reduce_send(r.partner, r.keep + offset, r.with + offset, n / elem,
                                           type, op, 0, 1)
                   : p2p.irecv_reduce(r.partner, r.keep + offset, r.with + offset, n / elem, type,
                                      op, 0));
  }
  // Posted before anything goes out: a partner that paces returns chunks while this rank still
  // gives, and a message no receive awaits is held aside, delaying what follows it.
  if (r.theirs != nullptr)
    for (std::size_t k = 0; k < gives; ++k) {
      const auto [offset, n] = cut(give_bytes, chunk, k);
      requests.push_back(p2p.irecv(r.partner, r.theirs + offset, n, 1));
    }
  std::size_t given = 0;
  auto give_next = [&] {
    const auto [offset, n] = cut(give_bytes, chunk, given++);
    requests.push_back(p2p.isend(r.partner, r.give + offset, n, 0));
  };
  // In cache every chunk is given at once; paced, the first now and each next below.
  give_next();
  if (!paced)
    while (given < gives) give_next();
  for (std::size_t k = 0; k < reduced; ++k) {
    p2p.wait(requests[k]);
    if (r.result_to >= 0 && !written_on) {
      const auto [offset, n] = cut(keep_bytes, chunk, k);
      requests.push_back(p2p.isend(r.result_to, r.keep + offset, n, 1));
    }
    // Paced: each next chunk given goes out once the partner's chunk before it has been
    // reduced and passed on. A queue of given chunks would fill the ring to the partner, and
    // the returns would wait behind it, landed and read again instead of written on as they
    // are reduced.
    if (paced && given < gives) give_next();
  }
  while (given < gives) give_next();
  p2p.wait_all(requests);
}

// The halving rounds before the last (distances virtual_size/2 down to 2): each keeps half of
// the range it holds, sends the other half to its partner and reduces what comes back into
// `out`. `held` starts with the whole range and gets the range kept after each round; returns
// where this rank's partial result then is (`held_data`, the input, until a reduction first
// lands in `out`: no copy of the input, the first round reads it where it is).
const char* halve(PointToPoint& p2p, const PowerOfTwoFold& fold, const char* held_data, char* out,
                  DataType type, ReduceOp op, std::vector<Range>& held) {
  const std::size_t elem = size_of(type);
  const int me = fold.virtual_rank();
  for (int mask = fold.virtual_size() / 2; mask >= 2; mask /= 2) {
    const auto [keep, give] = split(held.back(), me, mask);
    // Disjoint halves: what is sent is not what is reduced into.
    exchange(p2p, fold.real_rank(me ^ mask), held_data + give.begin * elem, give.count() * elem,
             out + keep.begin * elem, held_data + keep.begin * elem, keep.count(), type, op,
             /*reduce=*/true);
    held_data = out;
    held.push_back(keep);
  }
  return held_data;
}

void halving_doubling_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  if (allreduce_is_local(p2p, a)) return;
  const std::size_t elem = size_of(a.type);
  const auto* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  const PowerOfTwoFold fold(p2p);
  if (!fold.fold(p2p, in, out, a.count, a.type, a.op)) return;
  std::vector<Range> held{{0, a.count}};
  const char* held_data = halve(p2p, fold, fold.folded_in() ? out : in, out, a.type, a.op, held);
  const int me = fold.virtual_rank();
  const int partner = fold.real_rank(me ^ 1);
  const auto [keep, give] = split(held.back(), me, 1);
  last_halving_round(p2p,
                     {partner, held_data + give.begin * elem, give.count(), out + keep.begin * elem,
                      held_data + keep.begin * elem, keep.count(), partner,
                      out + give.begin * elem},
                     a.type, a.op);
  for (int mask = 2; mask < fold.virtual_size(); mask *= 2) {
    const Range mine = held.back();
    held.pop_back();
    const Range whole = held.back();
    const Range theirs =
        (me & mask) == 0 ? Range{mine.end, whole.end} : Range{whole.begin, mine.begin};
    exchange(p2p, fold.real_rank(me ^ mask), out + mine.begin * elem, mine.count() * elem,
             out + theirs.begin * elem, nullptr, theirs.count(), a.type, a.op, /*reduce=*/false);
  }
  fold.unfold(p2p, out, a.count * elem);
}

// The range of `count` elements virtual rank `v` holds reduced after the halving rounds.
Range reduced_range(int v, int virtual_size, std::size_t count) {
  Range range{0, count};
  for (int mask = virtual_size / 2; mask >= 1; mask /= 2) range = split(range, v, mask).first;
  return range;
}

// Reduce: the halving rounds of the all-reduce, then each rank's reduced segment straight to
// the root, each chunk as it is reduced in the last round (in cache, and overlapping the
// round), where the ring's reduce-scatter finishes before its gather to the root begins.
void halving_doubling_reduce(PointToPoint& p2p, const CollectiveArgs& a) {
  if (allreduce_is_local(p2p, a)) return;  // one rank (the root), or nothing to reduce
  const std::size_t elem = size_of(a.type);
  const bool root = p2p.rank() == a.root;
  const auto* in = static_cast<const char*>(a.send);
  char* out = root ? static_cast<char*>(a.recv) : static_cast<char*>(p2p.scratch(a.count * elem, 1));
  const PowerOfTwoFold fold(p2p);
  const int me = fold.virtual_rank();
  // The root's receives of every other rank's segment, cut as it is sent, posted first so that
  // they land in place. (A root that sits out of the power of two gets every segment.)
  std::vector<RequestPtr> segments;
  if (root) {
    const std::size_t chunk = chunk_in_elements(p2p, elem);
    for (int v = 0; v < fold.virtual_size(); ++v) {
      if (v == me) continue;
      const Range range = reduced_range(v, fold.virtual_size(), a.count);
      const std::size_t bytes = range.count() * elem;
      for (std::size_t k = 0; k < messages_of(bytes, chunk); ++k) {
        const auto [offset, n] = cut(bytes, chunk, k);
        segments.push_back(p2p.irecv(fold.real_rank(v), out + range.begin * elem + offset, n, 1));
      }
    }
  }
  if (fold.fold_in(p2p, in, out, a.count, a.type, a.op)) {
    std::vector<Range> held{{0, a.count}};
    const char* held_data = halve(p2p, fold, fold.folded_in() ? out : in, out, a.type, a.op, held);
    const auto [keep, give] = split(held.back(), me, 1);
    last_halving_round(p2p,
                       {fold.real_rank(me ^ 1), held_data + give.begin * elem, give.count(),
                        out + keep.begin * elem, held_data + keep.begin * elem, keep.count(),
                        root ? -1 : a.root, nullptr},
                       a.type, a.op);
  }
  p2p.wait_all(segments);
}

// Round with distance m moves (and, halving, reduces) m/2^K of the data each way, in chunks.
// Where the last halving round's half is one message and the link forwards, the message sent
// back costs no copy into the link: half its β.
double halving_doubling_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  const int pof2 = cost::floor_pof2(l.ranks);
  double seconds = PowerOfTwoFold::cost(l.ranks, q.bytes, cost::exchange_link(l, 1));
  for (int mask = 1; mask < pof2; mask *= 2) {
    const LinkCost link = cost::exchange_link(l, mask);
    const double part = q.bytes * mask / pof2;
    seconds += 2 * (cost::chunks_of(part, l.chunk_bytes) * link.alpha + part * link.beta) +
               part * link.gamma;
    if (mask == 1 && link.forwards && part <= static_cast<double>(l.chunk_bytes))
      seconds -= part * link.beta / 2;
  }
  return seconds;
}

// Reduce: the fold one way, the halving rounds, then the last round and the segments going to
// the root (its link takes the others' 2^k - 1) at once: the longer of the two, and one chunk.
double halving_doubling_reduce_cost(const CostQuery& q) {
  const Layout& l = q.layout;
  if (l.ranks <= 1) return 0;
  const int pof2 = cost::floor_pof2(l.ranks);
  double seconds = 0;
  if (pof2 != l.ranks) {
    const LinkCost link = cost::exchange_link(l, 1);
    seconds += link.alpha + q.bytes * (link.beta + link.gamma);
  }
  for (int mask = pof2 / 2; mask >= 2; mask /= 2) {
    const LinkCost link = cost::exchange_link(l, mask);
    const double part = q.bytes * mask / pof2;
    seconds += cost::chunks_of(part, l.chunk_bytes) * link.alpha + part * (link.beta + link.gamma);
  }
  const LinkCost link = cost::exchange_link(l, 1);
  const double segment = q.bytes / pof2;
  const double last = cost::chunks_of(segment, l.chunk_bytes) * link.alpha +
                      segment * (link.beta + link.gamma);
  const double into_root = l.flat().alpha + (pof2 - 1) * segment * l.flat().beta;
  return seconds + std::max(last, into_root) +
         std::min(segment, static_cast<double>(l.chunk_bytes)) * l.flat().beta;
}

const AlgorithmRegistrar kHalvingDoubling{AlgorithmInfo{
    "halving_doubling",
    "reduce-scatter by recursive halving, all-gather by recursive doubling (Rabenseifner)",
    {{Collective::allreduce, halving_doubling_allreduce},
     {Collective::reduce, halving_doubling_reduce}},
    {{Collective::allreduce, halving_doubling_cost},
     {Collective::reduce, halving_doubling_reduce_cost}}}};

}  // namespace
}  // namespace arcoll
