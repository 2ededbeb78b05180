// Recursive halving-doubling all-reduce (Rabenseifner): a reduce-scatter by recursive halving
// (round k: keep half of the current range, send the other half to rank ^ 2^(K-k), reduce
// what comes back), then an all-gather by recursive doubling in the reverse order. 2 log2(p)
// messages and the ring's 2(p-1)/p of the data: between recursive doubling (small) and the
// ring (large). Extra ranks of non-power-of-two worlds are folded in and out. The last halving
// round and the first doubling round have the same partner and run as one where that saves
// time: each reduced chunk goes back as it is reduced (irecv_reduce_send), so the transport
// writes the result for the partner while it is in cache instead of reading it again.
#include <array>

#include "algorithms/cost_model.hpp"
#include "algorithms/fold.hpp"

namespace arcoll {
namespace {

struct Range {
  std::size_t begin, end;  // elements
};

// The last halving round with `partner` and the first doubling round: `give` goes out on
// channel 0 while the kept half comes in, is reduced into `keep` (with `with`) and goes back on
// channel 1, and the partner's reduced half comes in there, into `theirs` (where `give` was
// read from when in place: the partner reduces each piece of it before it returns it). Chunks
// of the pipeline size, at least one message each way.
// A single message each way goes back at once: no wait between the rounds. Several go back
// as reduced, paced one at a time, only on buffers larger than the caches, where reading the
// result again costs a pass over memory; in cache, giving every chunk at once is faster than
// pacing (8 MiB on 2 ranks: about 15 %). Both ways send the same messages on the same
// channels, so ranks may decide differently (streaming stores are a rank's own setting).
void reduce_and_return(PointToPoint& p2p, int partner, const char* give, char* keep,
                       const char* with, std::size_t keep_count, char* theirs,
                       std::size_t theirs_count, DataType type, ReduceOp op) {
  const std::size_t elem = size_of(type);
  const std::size_t chunk = std::max<std::size_t>(1, p2p.chunk_bytes() / elem) * elem;
  const std::size_t keep_bytes = keep_count * elem, theirs_bytes = theirs_count * elem;
  if (keep_bytes <= chunk && theirs_bytes <= chunk) {
    // One message each way, as small exchanges are: nothing to allocate. Receives first, so
    // that messages land where they go instead of being held aside.
    const std::array<RequestPtr, 3> requests{
        p2p.irecv_reduce_send(partner, keep, with, keep_count, type, op, 0, 1),
        p2p.irecv(partner, theirs, theirs_bytes, 1), p2p.isend(partner, give, theirs_bytes, 0)};
    p2p.wait_all(requests);
    return;
  }
  // Message `k` of a half cut into chunks: its offset and length.
  auto cut = [&](std::size_t bytes, std::size_t k) {
    const std::size_t offset = k * chunk;
    return std::pair{offset, std::min(chunk, bytes - offset)};
  };
  auto count_of = [&](std::size_t bytes) {
    return std::max<std::size_t>(1, (bytes + chunk - 1) / chunk);
  };
  const bool paced = p2p.streaming_stores();
  const std::size_t returning = count_of(keep_bytes), gives = count_of(theirs_bytes);
  std::vector<RequestPtr> requests;
  requests.reserve(2 * returning + 2 * gives);
  for (std::size_t k = 0; k < returning; ++k) {
    const auto [offset, n] = cut(keep_bytes, k);
    requests.push_back(
        paced ? p2p.irecv_reduce_send(partner, keep + offset, with + offset, n / elem, type, op,
                                      0, 1)
              : p2p.irecv_reduce(partner, keep + offset, with + offset, n / elem, type, op, 0));
  }
  // Posted before anything goes out: a partner that paces returns chunks while this rank still
  // gives, and a message no receive awaits is held aside, delaying what follows it.
  for (std::size_t k = 0; k < gives; ++k) {
    const auto [offset, n] = cut(theirs_bytes, k);
    requests.push_back(p2p.irecv(partner, theirs + offset, n, 1));
  }
  std::size_t given = 0;
  auto give_next = [&] {
    const auto [offset, n] = cut(theirs_bytes, given++);
    requests.push_back(p2p.isend(partner, give + offset, n, 0));
  };
  // In cache every chunk is given at once; paced, the first now and each next below.
  give_next();
  if (!paced)
    while (given < gives) give_next();
  for (std::size_t k = 0; k < returning; ++k) {
    p2p.wait(requests[k]);
    if (!paced) {
      const auto [offset, n] = cut(keep_bytes, k);
      requests.push_back(p2p.isend(partner, keep + offset, n, 1));
    } else if (given < gives) {
      // Paced: each next chunk given goes out once the partner's chunk before it has been
      // reduced and returned. A queue of given chunks would fill the ring to the partner, and
      // the returns would wait behind it, landed and read again instead of written on as
      // they are reduced.
      give_next();
    }
  }
  while (given < gives) give_next();
  p2p.wait_all(requests);
}

void halving_doubling_allreduce(PointToPoint& p2p, const CollectiveArgs& a) {
  if (allreduce_is_local(p2p, a)) return;
  const std::size_t elem = size_of(a.type);
  const auto* in = static_cast<const char*>(a.send);
  char* out = static_cast<char*>(a.recv);
  const PowerOfTwoFold fold(p2p);
  if (!fold.fold(p2p, in, out, a.count, a.type, a.op)) return;
  // Where this rank's partial result is: the input until a reduction first lands in `out`
  // (no copy of the input: the first round reads it where it is).
  const char* held_data = fold.folded_in() ? out : in;
  const int me = fold.virtual_rank();
  // Ranges held after each halving round, to retrace in the doubling rounds.
  std::vector<Range> held{{0, a.count}};
  for (int mask = fold.virtual_size() / 2; mask >= 1; mask /= 2) {
    const Range r = held.back();
    const std::size_t middle = r.begin + (r.end - r.begin) / 2;
    const bool lower = (me & mask) == 0;
    const Range keep = lower ? Range{r.begin, middle} : Range{middle, r.end};
    const Range give = lower ? Range{middle, r.end} : Range{r.begin, middle};
    if (mask == 1) {
      reduce_and_return(p2p, fold.real_rank(me ^ mask), held_data + give.begin * elem,
                        out + keep.begin * elem, held_data + keep.begin * elem,
                        keep.end - keep.begin, out + give.begin * elem, give.end - give.begin,
                        a.type, a.op);
      break;
    }
    // Disjoint halves: what is sent is not what is reduced into.
    exchange(p2p, fold.real_rank(me ^ mask), held_data + give.begin * elem,
             (give.end - give.begin) * elem, out + keep.begin * elem,
             held_data + keep.begin * elem, keep.end - keep.begin, a.type, a.op,
             /*reduce=*/true);
    held_data = out;
    held.push_back(keep);
  }
  for (int mask = 2; mask < fold.virtual_size(); mask *= 2) {
    const Range mine = held.back();
    held.pop_back();
    const Range whole = held.back();
    const Range theirs =
        (me & mask) == 0 ? Range{mine.end, whole.end} : Range{whole.begin, mine.begin};
    exchange(p2p, fold.real_rank(me ^ mask), out + mine.begin * elem,
             (mine.end - mine.begin) * elem, out + theirs.begin * elem, nullptr,
             theirs.end - theirs.begin, a.type, a.op, /*reduce=*/false);
  }
  fold.unfold(p2p, out, a.count * elem);
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
    seconds += 2 * (chunks_of(part, l.chunk_bytes) * link.alpha + part * link.beta) +
               part * link.gamma;
    if (mask == 1 && link.forwards && part <= static_cast<double>(l.chunk_bytes))
      seconds -= part * link.beta / 2;
  }
  return seconds;
}

const AlgorithmRegistrar kHalvingDoubling{AlgorithmInfo{
    "halving_doubling",
    "reduce-scatter by recursive halving, all-gather by recursive doubling (Rabenseifner)",
    {{Collective::allreduce, halving_doubling_allreduce}},
    halving_doubling_cost}};

}  // namespace
}  // namespace arcoll
