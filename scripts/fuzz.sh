#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/) with clang into build-fuzz/ and runs each for
# FUZZ_SECONDS (default 10); exits non-zero when one finds a crash, a leak or undefined
# behaviour (its input is kept in build-fuzz/). Without clang and libFuzzer it says so and
# skips (exit 0): they are optional dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-10}
if ! command -v clang++ >/dev/null || [ -z "$(find /usr/lib/llvm-*/lib/clang -name 'libclang_rt.fuzzer-x86_64.a' 2>/dev/null | head -1)" ]; then
  echo "fuzz: SKIPPED: clang++ or libFuzzer (libclang-rt-dev) not installed"
  exit 0
fi
cmake -S tests/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz --parallel 2 >/dev/null
# The fuzzers run side by side, one a core.
targets=(fuzz_frame fuzz_store)
pids=()
for target in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$target"
  (cd build-fuzz && exec ./"$target" -max_total_time="$seconds" -print_final_stats=1 \
    "corpus/$target" >"$target.log" 2>&1) &
  pids+=($!)
done
failed=0
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  if wait "${pids[$i]}"; then
    echo "fuzz: $target passed: $(grep -o 'number_of_executed_units: [0-9]*' "build-fuzz/$target.log" | awk '{print $2}') inputs in ${seconds} s"
  else
    tail -40 "build-fuzz/$target.log"
    echo "fuzz: $target FAILED"
    failed=1
  fi
done
exit $failed
