// The soak: thousands of random collectives (algorithm, collective, type, op, count from 0 to
// 4 MiB, in place or not) on 5 ranks over two emulated hosts, so that shared memory and TCP
// both carry them; and its elastic form, on 6 ranks of which up to 4 are killed. Every result
// is checked element by element against an exact reference (see check_shared_result); open
// file descriptors must not grow, and under LeakSanitizer each rank checks itself for leaks
// once its communicator is gone. ARCOLL_SOAK_CALLS sets the number of calls (10000; a quarter
// of it for the elastic form), ARCOLL_SOAK_SEED the sequence (1).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "arcoll/communicator.hpp"
#include "arcoll/error.hpp"
#include "src/base/crc32c.hpp"
#include "tests/support/ranks.hpp"

// LeakSanitizer's entry point, present when the program is linked with it (this file itself
// is built without instrumentation: its loops are the harness, not what is under test).
extern "C" int __lsan_do_recoverable_leak_check() __attribute__((weak));

namespace arcoll::testing {
namespace {

constexpr int kRanks = 5;
constexpr double kMaxBytes = 4.0 * 1024 * 1024;

// Rank `rank`'s element i: a small integer from a few bits of a hash, so that every reduction
// over the ranks is exact in every type (avg then rounds once) and cheap to recompute.
template <ReduceOp Op>
int input(bool is_unsigned, int rank, std::size_t i, unsigned salt) {
  const unsigned h = (static_cast<unsigned>(i) * 2654435761u ^
                      (salt * 97u + static_cast<unsigned>(rank) * 40503u)) >>
                     9;
  if constexpr (Op == ReduceOp::prod) {
    const unsigned bits = h & 15;
    return bits == 0 ? 2 : bits == 1 && !is_unsigned ? -1 : 1;
  } else if constexpr (Op == ReduceOp::min || Op == ReduceOp::max) {
    return static_cast<int>(h & 63) - (is_unsigned ? 0 : 32);
  } else {
    return static_cast<int>(h & 7) - (is_unsigned ? 0 : 4);
  }
}

// The reduction of two values, exactly (in integers: the inputs are integers).
template <ReduceOp Op>
std::int64_t combine(std::int64_t a, std::int64_t b) {
  if constexpr (Op == ReduceOp::prod) return a * b;
  if constexpr (Op == ReduceOp::min) return std::min(a, b);
  if constexpr (Op == ReduceOp::max) return std::max(a, b);
  return a + b;  // sum, and avg before its division
}

// Load and store of one element type as double: the C++ type itself, or 16-bit floats
// through their conversions.
template <class Stored>
struct Codec {
  static double load(const void* p, std::size_t i) {
    Stored v;
    std::memcpy(&v, static_cast<const char*>(p) + i * sizeof v, sizeof v);
    return static_cast<double>(v);
  }
  static void store(void* p, std::size_t i, double value) {
    const auto v = static_cast<Stored>(value);
    std::memcpy(static_cast<char*>(p) + i * sizeof v, &v, sizeof v);
  }
};

template <float (*Widen)(std::uint16_t), std::uint16_t (*Narrow)(float)>
struct Codec16 {
  static double load(const void* p, std::size_t i) {
    std::uint16_t v;
    std::memcpy(&v, static_cast<const char*>(p) + i * sizeof v, sizeof v);
    return Widen(v);
  }
  static void store(void* p, std::size_t i, double value) {
    const std::uint16_t v = Narrow(static_cast<float>(value));
    std::memcpy(static_cast<char*>(p) + i * sizeof v, &v, sizeof v);
  }
};

// Calls f(Codec{}, integral_constant<ReduceOp>{}) for the runtime type and op.
template <class F>
auto dispatch(DataType type, ReduceOp op, F&& f) {
  auto with_op = [&](auto codec) {
    switch (op) {
      case ReduceOp::sum:
        return f(codec, std::integral_constant<ReduceOp, ReduceOp::sum>{});
      case ReduceOp::prod:
        return f(codec, std::integral_constant<ReduceOp, ReduceOp::prod>{});
      case ReduceOp::min:
        return f(codec, std::integral_constant<ReduceOp, ReduceOp::min>{});
      case ReduceOp::max:
        return f(codec, std::integral_constant<ReduceOp, ReduceOp::max>{});
      case ReduceOp::avg:
        break;
    }
    return f(codec, std::integral_constant<ReduceOp, ReduceOp::avg>{});
  };
  switch (type) {
    case DataType::f32:
      return with_op(Codec<float>{});
    case DataType::f64:
      return with_op(Codec<double>{});
    case DataType::f16:
      return with_op(Codec16<half_to_float, float_to_half>{});
    case DataType::bf16:
      return with_op(Codec16<bf16_to_float, float_to_bf16>{});
    case DataType::i8:
      return with_op(Codec<std::int8_t>{});
    case DataType::u8:
      return with_op(Codec<std::uint8_t>{});
    case DataType::i32:
      return with_op(Codec<std::int32_t>{});
    case DataType::i64:
      break;
  }
  return with_op(Codec<std::int64_t>{});
}

// `count` elements of rank `rank`'s input, from element `first` on.
void fill(void* out, DataType type, ReduceOp op, int rank, std::size_t first, std::size_t count,
          unsigned salt) {
  const bool is_unsigned = type == DataType::u8;
  dispatch(type, op, [&](auto codec, auto op_constant) {
    for (std::size_t i = 0; i < count; ++i)
      codec.store(out, i, input<op_constant()>(is_unsigned, rank, first + i, salt));
  });
}

// Elements of `out` (elements first.. of the result) that differ from the reduction over
// `world` ranks, computed exactly (avg: divided in double); `only_rank` >= 0: from that
// rank's input alone (gathers and broadcasts move data without reducing it).
std::size_t count_wrong(const void* out, DataType type, ReduceOp op, int world, std::size_t first,
                        std::size_t count, unsigned salt, int only_rank = -1) {
  const bool is_unsigned = type == DataType::u8;
  const double tolerance = type == DataType::f16    ? 0x1p-9
                           : type == DataType::bf16 ? 0x1p-6
                                                    : 0x1p-20;
  return dispatch(type, op, [&](auto codec, auto op_constant) {
    constexpr ReduceOp kOp = op_constant();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double want;
      if (only_rank >= 0) {
        want = input<kOp>(is_unsigned, only_rank, first + i, salt);
      } else {
        std::int64_t exact = input<kOp>(is_unsigned, 0, first + i, salt);
        for (int r = 1; r < world; ++r)
          exact = combine<kOp>(exact, input<kOp>(is_unsigned, r, first + i, salt));
        want = static_cast<double>(exact) / (kOp == ReduceOp::avg ? world : 1);
      }
      const double got = codec.load(out, i);
      if (!(std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want)))) ++wrong;
    }
    return wrong;
  });
}

enum class Kind { allreduce, reduce_scatter, allgather, broadcast, barrier };
const char* const kKindNames[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                  "barrier"};

struct Call {
  Kind kind = Kind::allreduce;
  std::string algorithm;
  DataType type = DataType::f32;
  ReduceOp op = ReduceOp::sum;
  std::size_t count = 0;  // per rank for reduce_scatter and allgather
  bool in_place = false;
  int root = 0;
  unsigned salt = 0;
  std::string describe() const {
    return std::string(kKindNames[static_cast<int>(kind)]) + " " + algorithm + " " +
           std::string(to_string(type)) + "/" + std::string(to_string(op)) + " count " +
           std::to_string(count) + (in_place ? " in place" : "") + " root " + std::to_string(root);
  }
};

// The same sequence on every rank: all draw from generators seeded alike.
Call next_call(std::mt19937_64& rng, const std::vector<std::string>& algorithms, int world) {
  Call c;
  const unsigned k = rng() % 20;
  c.kind = k < 10   ? Kind::allreduce
           : k < 13 ? Kind::reduce_scatter
           : k < 16 ? Kind::allgather
           : k < 19 ? Kind::broadcast
                    : Kind::barrier;
  c.algorithm = algorithms[rng() % algorithms.size()];
  c.type = kAllDataTypes[rng() % std::size(kAllDataTypes)];
  do {
    c.op = kAllReduceOps[rng() % std::size(kAllReduceOps)];
  } while (!is_supported(c.type, c.op));
  // Bytes log-uniform from 1 B to 4 MiB (one call in 50 empty); the blocked collectives share
  // that among the ranks.
  std::uniform_real_distribution<double> exponent(0.0, std::log(kMaxBytes));
  const double bytes = rng() % 50 == 0 ? 0.0 : std::exp(exponent(rng));
  const bool blocked = c.kind == Kind::reduce_scatter || c.kind == Kind::allgather;
  c.count = static_cast<std::size_t>(bytes / static_cast<double>(size_of(c.type)) /
                                     (blocked ? world : 1));
  c.in_place = rng() % 2 == 0;
  c.root = static_cast<int>(rng() % static_cast<unsigned>(world));
  c.salt = static_cast<unsigned>(rng() % 1000);
  return c;
}

// All-reduce, all-gather and broadcast leave the same bytes on every rank. Instead of every
// rank checking all of them against the reference, one rank (another one each call) does, and
// every rank's result is compared with it by CRC32C: every result is still checked, at a
// fraction of the cost. Returns the wrong elements of the checking rank, or 1 when this
// rank's result differs from the others'.
std::size_t check_shared_result(Communicator& comm, int call, const void* result, std::size_t bytes,
                                const std::function<std::size_t()>& check_reference) {
  const auto crc = static_cast<std::int64_t>(crc32c(result, bytes));
  std::int64_t lowest = crc, highest = crc;
  comm.allreduce(&lowest, 1, DataType::i64, ReduceOp::min);
  comm.allreduce(&highest, 1, DataType::i64, ReduceOp::max);
  std::size_t wrong = lowest == highest ? 0 : 1;
  if (call % comm.size() == comm.rank()) wrong += check_reference();
  return wrong;
}

// Runs one call and returns the number of wrong elements this rank sees.
std::size_t run_and_check(Communicator& comm, int call, const Call& c, std::vector<char>& a,
                          std::vector<char>& b) {
  const int world = comm.size(), rank = comm.rank();
  const std::size_t element = size_of(c.type);
  const std::size_t block = c.count * element;
  const auto whole = static_cast<std::size_t>(world) * block;
  if (a.size() < whole + 1) a.resize(whole + 1);
  if (b.size() < whole + 1) b.resize(whole + 1);
  // The result must overwrite every byte of it.
  std::memset(b.data(), 0xA5, (c.kind == Kind::allgather ? whole : block) + 1);
  comm.set_algorithm(c.algorithm);
  switch (c.kind) {
    case Kind::allreduce: {
      fill(a.data(), c.type, c.op, rank, 0, c.count, c.salt);
      char* out = c.in_place ? a.data() : b.data();
      comm.allreduce(a.data(), out, c.count, c.type, c.op);
      return check_shared_result(comm, call, out, block, [&] {
        return count_wrong(out, c.type, c.op, world, 0, c.count, c.salt);
      });
    }
    case Kind::reduce_scatter: {
      fill(a.data(), c.type, c.op, rank, 0, c.count * static_cast<std::size_t>(world), c.salt);
      char* out = c.in_place ? a.data() + static_cast<std::size_t>(rank) * block : b.data();
      comm.reduce_scatter(a.data(), out, c.count, c.type, c.op);
      return count_wrong(out, c.type, c.op, world, static_cast<std::size_t>(rank) * c.count,
                         c.count, c.salt);
    }
    case Kind::allgather: {
      char* mine = c.in_place ? b.data() + static_cast<std::size_t>(rank) * block : a.data();
      fill(mine, c.type, ReduceOp::sum, rank, 0, c.count, c.salt);
      comm.allgather(mine, b.data(), c.count, c.type);
      return check_shared_result(comm, call, b.data(), whole, [&] {
        std::size_t wrong = 0;
        for (int q = 0; q < world; ++q)
          wrong += count_wrong(b.data() + static_cast<std::size_t>(q) * block, c.type,
                               ReduceOp::sum, world, 0, c.count, c.salt, q);
        return wrong;
      });
    }
    case Kind::broadcast: {
      if (rank == c.root) fill(b.data(), c.type, ReduceOp::sum, rank, 0, c.count, c.salt);
      comm.broadcast(b.data(), c.count, c.type, c.root);
      return check_shared_result(comm, call, b.data(), block, [&] {
        return count_wrong(b.data(), c.type, ReduceOp::sum, world, 0, c.count, c.salt, c.root);
      });
    }
    case Kind::barrier:
      comm.barrier();
      return 0;
  }
  return 0;
}

int soak_rank(int calls, unsigned seed) {
  const int descriptors_before = open_descriptors();
  int descriptors_warm = 0, descriptors_end = 0;
  std::size_t wrong_calls = 0;
  std::map<std::string, int> per_kind;
  double bytes_moved = 0;
  const auto start = std::chrono::steady_clock::now();
  {
    auto comm = Communicator::from_env();
    std::vector<std::string> algorithms = Communicator::allreduce_algorithms();
    algorithms.push_back("auto");
    std::mt19937_64 rng(seed);
    std::vector<char> a, b;
    for (int i = 0; i < calls; ++i) {
      // Every buffer and connection the job needs has been made by now.
      if (i == calls / 10) descriptors_warm = open_descriptors();
      const Call c = next_call(rng, algorithms, comm->size());
      const std::size_t wrong = run_and_check(*comm, i, c, a, b);
      if (wrong != 0 && ++wrong_calls <= 10)
        std::printf("call %d (%s): %zu wrong elements on rank %d\n", i, c.describe().c_str(), wrong,
                    comm->rank());
      ++per_kind[kKindNames[static_cast<int>(c.kind)]];
      bytes_moved += static_cast<double>(c.count * size_of(c.type));
    }
    descriptors_end = open_descriptors();
    comm->barrier();
  }
  const int descriptors_after = open_descriptors();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d calls in %.1f s (%.0f MB per rank), %zu with wrong results;", calls, seconds,
              bytes_moved / 1e6, wrong_calls);
  for (const auto& [kind, n] : per_kind) std::printf(" %s %d", kind.c_str(), n);
  std::printf("\nopen descriptors: %d before, %d warm, %d at the end, %d after\n",
              descriptors_before, descriptors_warm, descriptors_end, descriptors_after);
  int status = wrong_calls == 0 ? 0 : 4;
  // After: at most as many as before (rank 0's store took over the launcher's listening socket).
  if (descriptors_end != descriptors_warm || descriptors_after > descriptors_before) status = 5;
  if (__lsan_do_recoverable_leak_check != nullptr) {
    if (__lsan_do_recoverable_leak_check() != 0) status = 6;
    std::printf("leak check: %s\n", status == 6 ? "leaks (above)" : "none");
  } else {
    std::printf("leak check: not in this build (the test command's sanitized build has it)\n");
  }
  return status;
}

// The elastic soak: 6 ranks run random collectives; a schedule that every rank draws alike
// SIGKILLs up to 4 of them, each at the start of a random call. The survivors' call fails;
// they shrink() and run that call again on their new communicator, and every result after a
// shrink is checked against the reference for the survivors. Each call is drawn from a
// generator of its own, with the world size it runs on.
constexpr int kElasticRanks = 6;

struct Kill {
  int call;
  int victim;  // a rank of the first communicator
};

std::vector<Kill> kill_schedule(unsigned seed, int calls) {
  std::mt19937_64 rng(seed * 7919u + 17u);
  const int kills = 1 + static_cast<int>(rng() % (kElasticRanks - 2));
  std::vector<int> alive(kElasticRanks);
  for (int r = 0; r < kElasticRanks; ++r) alive[static_cast<std::size_t>(r)] = r;
  std::vector<Kill> schedule;
  int at = 0;
  for (int k = 0; k < kills; ++k) {
    at += 1 + static_cast<int>(rng() % static_cast<unsigned>(std::max(1, calls / kills - 1)));
    const std::size_t who = rng() % alive.size();
    schedule.push_back({at, alive[who]});
    alive.erase(alive.begin() + static_cast<std::ptrdiff_t>(who));
  }
  return schedule;
}

int elastic_soak_rank(int calls, unsigned seed) {
  auto comm = Communicator::from_env();
  const int first_rank = comm->rank();
  const std::vector<Kill> schedule = kill_schedule(seed, calls);
  std::vector<std::string> algorithms = Communicator::allreduce_algorithms();
  algorithms.push_back("auto");
  std::vector<std::unique_ptr<Communicator>> retired;  // destroyed once the soak ends
  std::vector<char> a, b;
  std::size_t wrong_calls = 0, next_kill = 0, checked_after_a_kill = 0;
  for (int i = 0; i < calls; ++i) {
    if (next_kill < schedule.size() && schedule[next_kill].call == i &&
        schedule[next_kill].victim == first_rank)
      ::raise(SIGKILL);
    std::mt19937_64 rng(seed * 1000003ull + static_cast<unsigned>(i));
    const Call c = next_call(rng, algorithms, comm->size());
    try {
      const std::size_t wrong = run_and_check(*comm, i, c, a, b);
      if (wrong != 0 && ++wrong_calls <= 10)
        std::printf("call %d (%s) on %d ranks: %zu wrong elements on rank %d\n", i,
                    c.describe().c_str(), comm->size(), wrong, comm->rank());
      if (next_kill > 0) ++checked_after_a_kill;
    } catch (const Error& e) {
      // The victim dies as call i starts; a survivor may also fail call i - 1, whose last
      // bytes from the victim a reset connection dropped.
      if (next_kill >= schedule.size() || schedule[next_kill].call > i + 1 ||
          schedule[next_kill].call < i) {
        std::printf("call %d (%s) failed with no rank killed: %s\n", i, c.describe().c_str(),
                    e.what());
        return 3;
      }
      const int before = comm->size();
      auto shrunk = comm->shrink();
      if (shrunk->size() != before - 1) {
        std::printf("after the kill at call %d: %d ranks where %d were expected\n", i,
                    shrunk->size(), before - 1);
        return 7;
      }
      retired.push_back(std::move(comm));
      comm = std::move(shrunk);
      ++next_kill;
      // The survivors go on from the first call any of them failed.
      std::int64_t resume = i;
      comm->allreduce(&resume, 1, DataType::i64, ReduceOp::min);
      i = static_cast<int>(resume) - 1;
    }
  }
  comm->barrier();
  std::printf(
      "%d calls, %zu kills survived, %zu calls checked after a kill, %zu with wrong "
      "results, %d ranks at the end\n",
      calls, next_kill, checked_after_a_kill, wrong_calls, comm->size());
  return wrong_calls == 0 ? 0 : 4;
}

TEST(Soak, RandomKillsAreSurvivedByShrinkingAndResultsStayCorrect) {
  const char* calls_text = std::getenv("ARCOLL_SOAK_CALLS");
  const char* seed_text = std::getenv("ARCOLL_SOAK_SEED");
  const int calls = (calls_text != nullptr ? std::atoi(calls_text) : 10000) / 4;
  const unsigned seed = seed_text != nullptr ? static_cast<unsigned>(std::atoi(seed_text)) : 1;
  const std::vector<Kill> schedule = kill_schedule(seed, calls);
  LocalLaunchOptions options;
  options.ranks = kElasticRanks;
  options.env = {{"ARCOLL_EMULATED_HOSTS", "2"}, {"ARCOLL_TIMEOUT", "60"}};
  options.failure_grace = std::chrono::minutes(10);  // the survivors carry on
  auto exits = launch(options, [&] { return elastic_soak_rank(calls, seed); });
  ASSERT_EQ(exits.size(), static_cast<std::size_t>(kElasticRanks));
  for (const auto& e : exits) {
    const bool victim = std::any_of(schedule.begin(), schedule.end(),
                                    [&](const Kill& k) { return k.victim == e.rank; });
    if (victim) {
      EXPECT_EQ(e.signal, SIGKILL) << "rank " << e.rank << ":\n" << e.output;
      continue;
    }
    EXPECT_TRUE(e.ok()) << "rank " << e.rank << ":\n" << e.output;
    EXPECT_NE(e.output.find(std::to_string(schedule.size()) + " kills survived"), std::string::npos)
        << e.output;
    EXPECT_NE(e.output.find("0 with wrong results"), std::string::npos) << e.output;
    std::printf("rank %d: %s", e.rank, e.output.c_str());
  }
}

TEST(Soak, RandomCollectivesOnMixedTransportsStayCorrectWithoutGrowth) {
  const char* calls_text = std::getenv("ARCOLL_SOAK_CALLS");
  const char* seed_text = std::getenv("ARCOLL_SOAK_SEED");
  const int calls = calls_text != nullptr ? std::atoi(calls_text) : 10000;
  const unsigned seed = seed_text != nullptr ? static_cast<unsigned>(std::atoi(seed_text)) : 1;
  LocalLaunchOptions options;
  options.ranks = kRanks;
  options.env = {{"ARCOLL_EMULATED_HOSTS", "2"}, {"ARCOLL_TIMEOUT", "60"}};
  auto exits = launch(options, [&] { return soak_rank(calls, seed); });
  ASSERT_EQ(exits.size(), static_cast<std::size_t>(kRanks));
  for (const auto& e : exits) {
    EXPECT_TRUE(e.ok()) << "rank " << e.rank << ":\n" << e.output;
    EXPECT_NE(e.output.find("0 with wrong results"), std::string::npos) << e.output;
  }
  std::printf("rank 0: %s", exits[0].output.c_str());
}

}  // namespace
}  // namespace arcoll::testing
