// Micro-benchmarks of the reduction kernels, per instruction set, against memcpy.
//
// Bytes processed (bytes_per_second, shown by Google Benchmark in binary units, 1 G/s = 2^30
// bytes/s) count the streams the operation needs, not what the memory system moves:
//  - reduce: 3 streams per element, 2 reads (a, b) + 1 write (dst);
//  - memcpy: 2 streams, 1 read + 1 write.
// Write-allocate traffic (reading a destination line before writing it) is counted in neither.
// "sum of f32 at memcpy-class GB/s" means reduce/.../f32/sum reaching the bytes_per_second of
// memcpy at the same buffer size.
//
// Names: memcpy/<MiB>, reduce/<isa>/<type>/<op>/<MiB>[/inplace]; <MiB> is the size of each
// buffer; inplace is dst == a, the accumulation of a collective. Run a subset with e.g.
//   reduce_bench --benchmark_filter='f32/sum|memcpy'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "arcoll/types.hpp"
#include "src/base/reduce.hpp"

namespace {

using arcoll::DataType;
using arcoll::ReduceOp;
namespace kernels = arcoll::kernels;

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Memory = std::unique_ptr<unsigned char, FreeDeleter>;

// Three page-aligned buffers, grown on demand and kept for the whole run.
class Buffers {
 public:
  unsigned char* get(int index, std::size_t bytes) {
    if (bytes > capacity_) {
      capacity_ = bytes;
      for (Memory& m : memory_) {
        m.reset(static_cast<unsigned char*>(std::aligned_alloc(4096, bytes)));
        if (!m) throw std::bad_alloc();
      }
    }
    return memory_[index].get();
  }

 private:
  std::size_t capacity_ = 0;
  Memory memory_[3];
};

Buffers& buffers() {
  static Buffers instance;
  return instance;
}

// Fills `bytes` with copies of the element `one` (no zeros, no subnormals).
void fill(unsigned char* p, std::size_t bytes, const void* one, std::size_t size) {
  for (std::size_t i = 0; i + size <= bytes; i += size) std::memcpy(p + i, one, size);
}

void fill_ones(unsigned char* p, std::size_t bytes, DataType type) {
  switch (type) {
    case DataType::f32: {
      const float v = 1.0f;
      fill(p, bytes, &v, 4);
      break;
    }
    case DataType::f64: {
      const double v = 1.0;
      fill(p, bytes, &v, 8);
      break;
    }
    case DataType::f16: {
      const std::uint16_t v = 0x3c00;  // 1.0
      fill(p, bytes, &v, 2);
      break;
    }
    case DataType::bf16: {
      const std::uint16_t v = 0x3f80;  // 1.0
      fill(p, bytes, &v, 2);
      break;
    }
    default:
      std::memset(p, 1, bytes);
  }
}

void bm_memcpy(benchmark::State& state, std::size_t bytes) {
  unsigned char* src = buffers().get(0, bytes);
  unsigned char* dst = buffers().get(1, bytes);
  std::memset(src, 1, bytes);
  std::memset(dst, 2, bytes);
  for (auto _ : state) {
    std::memcpy(dst, src, bytes);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 2 *
                          static_cast<std::int64_t>(bytes));
}

void bm_reduce(benchmark::State& state, const std::string& isa, DataType type, ReduceOp op,
               std::size_t bytes, bool in_place) {
  if (!kernels::set_instruction_set(isa)) {
    state.SkipWithError("instruction set not available");
    return;
  }
  const std::size_t count = bytes / arcoll::size_of(type);
  unsigned char* a = buffers().get(0, bytes);
  unsigned char* b = buffers().get(1, bytes);
  unsigned char* dst = in_place ? a : buffers().get(2, bytes);
  fill_ones(a, bytes, type);
  fill_ones(b, bytes, type);
  if (!in_place) fill_ones(dst, bytes, type);
  for (auto _ : state) {
    kernels::reduce(dst, a, b, count, type, op);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 3 *
                          static_cast<std::int64_t>(bytes));
  state.SetLabel(std::string(kernels::instruction_set()));
  kernels::set_instruction_set("auto");
}

std::vector<std::string> available_instruction_sets() {
  std::vector<std::string> isas;
  for (const char* isa : {"generic", "avx2", "avx512"}) {
    if (kernels::set_instruction_set(isa)) isas.emplace_back(isa);
  }
  kernels::set_instruction_set("auto");
  return isas;
}

void register_all() {
  const std::size_t large_sizes[] = {1 * kMiB, 16 * kMiB, 64 * kMiB, 256 * kMiB};
  for (std::size_t bytes : large_sizes) {
    const std::string mib = std::to_string(bytes / kMiB);
    benchmark::RegisterBenchmark(("memcpy/" + mib).c_str(), bm_memcpy, bytes)
        ->Unit(benchmark::kMicrosecond);
  }
  for (const std::string& isa : available_instruction_sets()) {
    for (std::size_t bytes : large_sizes) {
      const std::string mib = std::to_string(bytes / kMiB);
      for (bool in_place : {false, true}) {
        const std::string name = "reduce/" + isa + "/f32/sum/" + mib + (in_place ? "/inplace" : "");
        benchmark::RegisterBenchmark(name.c_str(), bm_reduce, isa, DataType::f32, ReduceOp::sum,
                                     bytes, in_place)
            ->Unit(benchmark::kMicrosecond);
      }
    }
    struct Case {
      DataType type;
      ReduceOp op;
    };
    for (Case c : {Case{DataType::f64, ReduceOp::sum}, Case{DataType::f16, ReduceOp::sum},
                   Case{DataType::bf16, ReduceOp::sum}, Case{DataType::i32, ReduceOp::sum},
                   Case{DataType::f32, ReduceOp::max}}) {
      const std::string name = "reduce/" + isa + "/" + std::string(arcoll::to_string(c.type)) +
                               "/" + std::string(arcoll::to_string(c.op)) + "/16";
      benchmark::RegisterBenchmark(name.c_str(), bm_reduce, isa, c.type, c.op, 16 * kMiB, false)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::AddCustomContext("arcoll_kernels_default", std::string(kernels::instruction_set()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
