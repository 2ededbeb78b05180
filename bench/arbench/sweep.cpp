#include "arbench/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>

#include "arbench/backends/backend.hpp"
#include "arbench/reference.hpp"
#include "arbench/text.hpp"

namespace arbench {
namespace {

using arcoll::DataType;
using arcoll::ReduceOp;

struct BufferDeleter {
  bool shared = false;
  void operator()(std::byte* p) const {
    if (shared)
      arcoll::mem_free(p);
    else
      std::free(p);
  }
};
using Buffer = std::unique_ptr<std::byte, BufferDeleter>;

// Cache-line aligned and touched, so that page faults stay out of the timed loops. `shared`:
// from arcoll::mem_alloc.
Buffer allocate(std::size_t bytes, bool shared) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (std::max<std::size_t>(bytes, kAlign) + kAlign - 1) / kAlign * kAlign;
  auto* p = static_cast<std::byte*>(shared ? arcoll::mem_alloc(rounded)
                                           : std::aligned_alloc(kAlign, rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return Buffer(p, BufferDeleter{shared});
}

struct LocalResult {
  std::vector<double> seconds;  // mean per iteration of each repetition, this rank
  int iters = 0;
  std::int64_t wrong = 0;
  Pattern::Errors errors;
};

// The patterns of a row: this rank's (inputs, and the expected reduction) and, for the
// collectives that move data, every rank's inputs, which land in this rank's output.
struct RowPatterns {
  RowPatterns(Coll coll, DataType type, ReduceOp op, int rank, int ranks, DataType wire)
      : mine(type, op, rank, ranks, narrowed(coll) ? wire : DataType::f32) {
    if (reduces(coll)) return;
    for (int q = 0; q < ranks; ++q) everyone.emplace_back(type, op, q, ranks);
  }
  // The collectives arcoll carries in a 16-bit wire format.
  static bool narrowed(Coll coll) { return coll == Coll::allreduce || coll == Coll::reduce_scatter; }
  const Pattern& of(int rank) const { return everyone[static_cast<std::size_t>(rank)]; }

  Pattern mine;
  std::vector<Pattern> everyone;
};

// Elements of a call's result that differ from what it must deliver on this rank (root 0).
std::int64_t count_wrong(const Call& c, const RowPatterns& p, int rank, int ranks) {
  const std::size_t block = c.count;
  const auto* recv = static_cast<const std::byte*>(c.recv);
  const std::size_t bytes = block * arcoll::size_of(c.type);
  auto blocks = [&](auto&& wrong_in) {
    std::int64_t wrong = 0;
    for (int q = 0; q < ranks; ++q) wrong += wrong_in(q, recv + static_cast<std::size_t>(q) * bytes);
    return wrong;
  };
  const auto r = static_cast<std::size_t>(rank);
  switch (c.coll) {
    case Coll::allreduce:
      return p.mine.count_wrong(recv, block);
    case Coll::reduce_scatter:
      return p.mine.count_wrong(recv, block, r * block);
    case Coll::reduce:
      return rank == c.root ? p.mine.count_wrong(recv, block) : 0;
    case Coll::allgather:
      return blocks([&](int q, const std::byte* b) { return p.of(q).count_unlike_input(b, block); });
    case Coll::gather:
      if (rank != c.root) return 0;
      return blocks([&](int q, const std::byte* b) { return p.of(q).count_unlike_input(b, block); });
    case Coll::alltoall:
      return blocks(
          [&](int q, const std::byte* b) { return p.of(q).count_unlike_input(b, block, r * block); });
    case Coll::broadcast:
      return p.of(c.root).count_unlike_input(recv, block);
    case Coll::scatter:
      return p.of(c.root).count_unlike_input(recv, block, r * block);
    case Coll::sendrecv:
      return p.of((rank + ranks - 1) % ranks).count_unlike_input(recv, block);
  }
  return 0;
}

// Seconds one call of `once` takes on the slowest rank (every rank runs it: it is collective).
double agreed_seconds_of(arcoll::Communicator& comm, const std::function<void()>& once, int calls) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) once();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm.allreduce(&seconds, 1, DataType::f64, ReduceOp::max);
  return seconds / calls;
}

// -n auto: rounds of 1, 4, 16, ... iterations until a round takes a tenth of the target on
// the slowest rank; the count that fills the target at that pace, at least `min_iters`.
int agreed_iterations(arcoll::Communicator& comm, const std::function<void()>& once,
                      double target_seconds, int min_iters) {
  constexpr int kMaxIters = 1'000'000;
  for (int round = 1;; round *= 4) {
    const double each = agreed_seconds_of(comm, once, round);
    if (each * round >= target_seconds / 10 || round >= kMaxIters / 4) {
      const double wanted = each > 0 ? target_seconds / each : kMaxIters;
      return static_cast<int>(
          std::clamp(wanted, static_cast<double>(min_iters), double{kMaxIters}));
    }
  }
}

// One group of a row (out of place or in place) through one backend: warmed up, its
// iteration count agreed, then timed once per repetition, in turn with the other backends'
// groups of the size, then checked: one iteration on fresh inputs whose result is compared
// with the reference. The groups share buffers, so each repetition stages its inputs again
// (untimed); in place, its timed iterations feed on their own results.
class Group {
 public:
  Group(arcoll::Communicator& comm, Backend& backend, Coll coll, const RowPatterns& patterns,
        std::byte* send_buffer, std::byte* recv_buffer, std::size_t count, bool in_place,
        const SweepSettings& settings)
      : backend_(backend),
        patterns_(patterns),
        shape_(shape(coll, count, comm.size(), comm.rank(), /*root=*/0)),
        call_{coll, send_buffer, recv_buffer, shape_.block, patterns.mine.type(),
              patterns.mine.op(), 0} {
    const std::size_t e = arcoll::size_of(patterns.mine.type());
    if (in_place && shape_.in_recv) call_.send = recv_buffer + shape_.send_in_recv * e;
    if (in_place && !shape_.in_recv) call_.recv = send_buffer + shape_.recv_in_send * e;
    stage_inputs();
    if (settings.target_seconds <= 0) {
      for (int i = 0; i < settings.warmup_iters; ++i) backend_.run(call_);
      result_.iters = settings.iters;
      return;
    }
    // Timed by the clock, the warm-up ends early where one call alone lasts the target: its
    // buffers are touched and the backend set up by then, and more such calls (a peer's
    // 128 MiB all-reduce takes a third of a second here) would only lengthen the run. So do
    // the passes' own iterations: at least kMinAutoIters over all of them, at least one each.
    auto once = [this] { backend_.run(call_); };
    if (settings.warmup_iters > 0 && agreed_seconds_of(comm, once, 1) < settings.target_seconds)
      for (int i = 1; i < settings.warmup_iters; ++i) once();
    result_.iters = agreed_iterations(comm, once, settings.target_seconds,
                                      min_auto_iters_per_pass(settings.repeat));
  }

  // `rewarm`: other sizes ran since this group last did (passes), so one untimed iteration
  // brings its state (caches, the backends' buffers for this size) back first.
  void time(bool rewarm) {
    stage_inputs();
    if (rewarm) {
      backend_.run(call_);
      stage_inputs();
    }
    backend_.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < result_.iters; ++i) backend_.run(call_);
    const auto elapsed = std::chrono::steady_clock::now() - start;
    result_.seconds.push_back(std::chrono::duration<double>(elapsed).count() / result_.iters);
  }

  LocalResult check_skipped() const { return result_; }
  LocalResult check(bool in_place, int rank, int ranks) {
    const Pattern& pattern = patterns_.mine;
    if (!in_place) pattern.poison(call_.recv, shape_.recv);
    stage_inputs();
    backend_.run(call_);
    backend_.stage_out(call_.recv, bytes());
    result_.wrong = count_wrong(call_, patterns_, rank, ranks);
    if (pattern.rounded_by_wire()) result_.errors = pattern.errors(call_.recv, shape_.recv);
    return result_;
  }

 private:
  std::size_t bytes() const {
    return std::max(shape_.send, shape_.recv) * arcoll::size_of(patterns_.mine.type());
  }
  void stage_inputs() {
    auto* send = static_cast<std::byte*>(const_cast<void*>(call_.send));
    patterns_.mine.fill_input(send, shape_.send);
    backend_.stage_in(send, call_.recv, bytes());
  }

  Backend& backend_;
  const RowPatterns& patterns_;
  const CollShape shape_;
  Call call_;
  LocalResult result_;
};

// `repetitions`: each repetition's time, the slowest rank's.
GroupResult finish(const std::vector<double>& repetitions, std::size_t bytes, double bus_factor) {
  GroupResult g;
  const double seconds = quantile(repetitions, 0.5);
  if (repetitions.size() > 1) {
    Spread s;
    s.count = static_cast<int>(repetitions.size());
    s.min_us = *std::min_element(repetitions.begin(), repetitions.end()) * 1e6;
    s.max_us = *std::max_element(repetitions.begin(), repetitions.end()) * 1e6;
    s.median_us = seconds * 1e6;
    s.p99_us = quantile(repetitions, 0.99) * 1e6;
    double mean = 0, squares = 0;
    for (double t : repetitions) mean += t / static_cast<double>(repetitions.size());
    for (double t : repetitions) squares += (t - mean) * (t - mean);
    s.cv = mean > 0 ? std::sqrt(squares / static_cast<double>(repetitions.size() - 1)) / mean : 0;
    for (double t : repetitions) s.passes_us.push_back(t * 1e6);
    g.spread = s;
  }
  g.time_us = seconds * 1e6;
  g.algbw_gbs = seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
  g.busbw_gbs = g.algbw_gbs * bus_factor;
  return g;
}

// The types and operators of a collective's rows: every pair for reductions, every type once
// (as sum, printed "none") for the collectives that move data.
std::vector<std::pair<DataType, ReduceOp>> combinations(Coll coll, const SweepSettings& settings) {
  std::vector<std::pair<DataType, ReduceOp>> out;
  for (DataType type : settings.types) {
    if (!reduces(coll)) {
      out.emplace_back(type, ReduceOp::sum);
      continue;
    }
    for (ReduceOp op : settings.ops)
      if (arcoll::is_supported(type, op)) out.emplace_back(type, op);
  }
  return out;
}

}  // namespace

std::vector<std::size_t> sweep_sizes(std::size_t min_bytes, std::size_t max_bytes,
                                     std::size_t factor, std::size_t step_bytes) {
  std::vector<std::size_t> sizes;
  constexpr std::size_t kMax = std::numeric_limits<std::size_t>::max();
  for (std::size_t size = min_bytes; size <= max_bytes;) {
    sizes.push_back(size);
    if (factor > 1) {
      if (size == 0)
        size = 1;
      else if (size > kMax / factor)
        break;
      else
        size *= factor;
    } else {
      if (step_bytes == 0 || size > kMax - step_bytes) break;
      size += step_bytes;
    }
  }
  return sizes;
}

std::size_t row_count(const SweepSettings& settings) {
  std::size_t rows = 0;
  for (Coll coll : settings.colls) rows += combinations(coll, settings).size() * settings.sizes.size();
  return rows;
}

std::vector<Row> run_sweep(arcoll::Communicator& comm, const std::vector<Backend*>& backends,
                           const SweepSettings& settings, const SweepCallbacks& callbacks) {
  // Both buffers hold a row's whole size, whatever the collective makes of them.
  std::size_t max_bytes = 0;
  for (std::size_t size : settings.sizes) max_bytes = std::max(max_bytes, size);
  // Under --shared-buffers arcoll's backends take theirs from mem_alloc; heap buffers only
  // for the backends that use them.
  Buffer send, recv, shared_send, shared_recv;
  if (std::any_of(backends.begin(), backends.end(),
                  [&](const Backend* b) { return !settings.shared_buffers || !b->is_arcoll(); })) {
    send = allocate(max_bytes, false);
    recv = allocate(max_bytes, false);
  }
  if (settings.shared_buffers) {
    shared_send = allocate(max_bytes, true);
    shared_recv = allocate(max_bytes, true);
  }
  auto buffers_of = [&](const Backend& backend) {
    const bool shared = settings.shared_buffers && backend.is_arcoll();
    return shared ? std::pair(shared_send.get(), shared_recv.get())
                  : std::pair(send.get(), recv.get());
  };

  const int n = comm.size(), rank = comm.rank();
  std::size_t total = 0;
  for (Coll coll : settings.colls)
    for (auto [type, op] : combinations(coll, settings))
      for (Backend* backend : backends)
        if (!backend->unsupported(coll, type, op)) total += settings.sizes.size();
  std::vector<Row> rows;
  rows.reserve(total);
  for (Coll coll : settings.colls)
    for (auto [type, op] : combinations(coll, settings)) {
      const RowPatterns patterns(coll, type, op, rank, n, settings.wire);
      std::vector<Backend*> running;
      for (Backend* backend : backends) {
        if (auto reason = backend->unsupported(coll, type, op)) {
          if (callbacks.skipped) callbacks.skipped(backend->name(), coll, type, op, *reason);
        } else {
          running.push_back(backend);
        }
      }
      // A size's rows once its last pass is timed: checked, and every rank's times gathered.
      auto finish_size = [&](std::size_t first,
                             const std::vector<std::unique_ptr<Group>>& groups) {
        for (std::size_t b = 0; b < running.size(); ++b) {
          Row& row = rows[first + b];
          const bool checked = settings.check && running[b]->reduces();
          const LocalResult out = checked ? groups[2 * b]->check(false, rank, n)
                                          : groups[2 * b]->check_skipped();
          const LocalResult in = checked ? groups[2 * b + 1]->check(true, rank, n)
                                         : groups[2 * b + 1]->check_skipped();
          std::vector<double> seconds = out.seconds;  // out of place, then in place
          seconds.insert(seconds.end(), in.seconds.begin(), in.seconds.end());
          comm.allreduce(seconds.data(), seconds.size(), DataType::f64, ReduceOp::max);
          const auto middle = seconds.begin() + static_cast<std::ptrdiff_t>(out.seconds.size());
          const double factor = running[b]->bus_factor(coll, n);
          row.out_of_place = finish({seconds.begin(), middle}, row.size_bytes, factor);
          row.in_place = finish({middle, seconds.end()}, row.size_bytes, factor);
          row.out_of_place.iters = out.iters;
          row.in_place.iters = in.iters;
          if (checked) {
            std::int64_t wrong[2] = {out.wrong, in.wrong};
            comm.allreduce(wrong, 2, DataType::i64, ReduceOp::sum);
            row.out_of_place.wrong = wrong[0];
            row.in_place.wrong = wrong[1];
            if (patterns.mine.rounded_by_wire()) {
              double errors[4] = {out.errors.max_abs, out.errors.max_rel, in.errors.max_abs,
                                  in.errors.max_rel};
              comm.allreduce(errors, 4, DataType::f64, ReduceOp::max);
              row.out_of_place.max_abs_error = errors[0];
              row.out_of_place.max_rel_error = errors[1];
              row.in_place.max_abs_error = errors[2];
              row.in_place.max_rel_error = errors[3];
            }
          }
          if (callbacks.after) callbacks.after(row, first + b, total);
        }
      };
      // Every size's groups are prepared (warmed up, their iteration counts agreed), then timed
      // pass by pass through the sizes, every backend of a size in turn, so that a phase of the
      // host (another job, the clock, the memory's state) weighs on every backend alike and on
      // one pass of a size rather than on all of them; a size's rows end with its last pass.
      struct SizeGroups {
        std::size_t first_row;
        std::vector<std::unique_ptr<Group>> groups;  // out of place, in place; per backend
      };
      std::vector<SizeGroups> sizes;
      for (std::size_t size : settings.sizes) {
        SizeGroups& at = sizes.emplace_back(SizeGroups{rows.size(), {}});
        for (Backend* backend : running) {
          Row row;
          row.backend = backend->name();
          row.coll = coll;
          row.type = type;
          row.op = op;
          row.root = rooted(coll) ? 0 : -1;
          row.count = row_elements(coll, size / arcoll::size_of(type), n);
          row.size_bytes = row.count * arcoll::size_of(type);
          if (callbacks.before) callbacks.before(row, rows.size(), total);
          const auto [send_buffer, recv_buffer] = buffers_of(*backend);
          for (const bool in_place : {false, true})
            at.groups.push_back(std::make_unique<Group>(comm, *backend, coll, patterns,
                                                        send_buffer, recv_buffer, row.count,
                                                        in_place, settings));
          rows.push_back(row);
        }
      }
      const bool rewarm = settings.repeat > 1 && sizes.size() > 1;
      for (int pass = 1; pass <= settings.repeat; ++pass)
        for (SizeGroups& at : sizes) {
          if (callbacks.pass && !running.empty())
            callbacks.pass(pass, settings.repeat, rows[at.first_row]);
          for (const auto& group : at.groups) group->time(rewarm);
          if (pass == settings.repeat) finish_size(at.first_row, at.groups);
        }
    }
  return rows;
}

}  // namespace arbench
