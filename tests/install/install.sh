#!/usr/bin/env bash
# The installed arcoll as a downstream project sees it: `cmake --install` into a fresh prefix,
# then examples/ configured and built as a project of its own against that prefix, through
# find_package(arcoll CONFIG) with the shared and with the static library and through
# pkg-config, every example run on 2 or 3 ranks and its results checked; the installed arbench runs
# too, and the installed headers include nothing that is not installed.
#
# Usage: bash install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?usage: install.sh BUILD_DIR SOURCE_DIR}
source_dir=${2:?usage: install.sh BUILD_DIR SOURCE_DIR}
# shellcheck source=../arbench/lib/common.sh
source "$source_dir/tests/arbench/lib/common.sh"

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >"$work/install.log" ||
  fail "cmake --install failed: $(cat "$work/install.log")"
for file in include/arcoll/communicator.hpp include/arcoll/arcoll.h bin/arbench \
  lib/libarcoll.a lib/pkgconfig/arcoll.pc lib/cmake/arcoll/arcollConfig.cmake; do
  [[ -e $prefix/$file ]] || fail "not installed: $file ($(cd "$prefix" && find . -type f | sort | tr '\n' ' '))"
done
ls "$prefix"/lib/libarcoll.so* >/dev/null || fail "no shared library installed"

# Public headers only: each compiles on its own with nothing but the prefix to include from.
for header in "$prefix"/include/arcoll/*; do
  printf '#include <arcoll/%s>\n' "$(basename "$header")" >"$work/header.cpp"
  c++ -std=c++20 -fsyntax-only -I"$prefix/include" "$work/header.cpp" 2>"$work/header.err" ||
    fail "$(basename "$header") does not compile alone: $(cat "$work/header.err")"
  if grep -q '#include "' "$header"; then
    grep '#include "' "$header" | grep -v '"arcoll/' &&
      fail "$(basename "$header") includes a header that is not installed"
  fi
done

# Runs `program` as ranks 0 .. n-1 of a job; every rank must exit 0. Rank 0's output is left
# in $work/rank0.out.
port() { "$python" "$source_dir/tests/support/free_port.py"; }
run_ranks() {
  local n=$1 program=$2 master_port pids=() rank status
  master_port=$(port)
  for ((rank = 0; rank < n; ++rank)); do
    ARCOLL_RANK=$rank ARCOLL_WORLD_SIZE=$n ARCOLL_MASTER_ADDR=127.0.0.1 \
      ARCOLL_MASTER_PORT=$master_port ARCOLL_JOB_TOKEN=install-test \
      timeout 60 "$program" >"$work/rank$rank.out" 2>&1 &
    pids+=($!)
  done
  for ((rank = 0; rank < n; ++rank)); do
    status=0
    wait "${pids[$rank]}" || status=$?
    ((status == 0)) || fail "$program on $n ranks: rank $rank exited with $status: $(cat "$work/rank$rank.out")"
  done
}
# The all-reduce examples: rank r contributes r + i, so rank 0 prints the sums 1 3 5 ... 15.
run_allreduce() {
  run_ranks 2 "$1"
  grep -q "sum over 2 ranks.*: 1 3 5 7 9 11 13 15$" "$work/rank0.out" ||
    fail "$1 printed wrong sums: $(cat "$work/rank0.out")"
}
# The other examples check their own results and say "<name>: ok" on rank 0.
run_example() {
  local n=$1 program=$2 name
  name=$(basename "$program")
  name=${name#example_}
  run_ranks "$n" "$program"
  grep -q "^$name: ok" "$work/rank0.out" || fail "$program on $n ranks: $(cat "$work/rank0.out")"
}
# Each example and the ranks it runs on (3 where its groups or servers need them).
declare -A example_ranks=([nonblocking]=2 [nonblocking_c]=2 [parameter_server]=3
  [shared_buffers]=2 [communicators]=3 [errors]=2)

# CMake: shared, then static. Through ccache where it is installed, as arcoll's own build: the
# static build compiles the same files with the same flags again.
launchers=()
if ccache=$(command -v ccache); then
  launchers=(-DCMAKE_C_COMPILER_LAUNCHER="$ccache" -DCMAKE_CXX_COMPILER_LAUNCHER="$ccache")
fi
for static in OFF ON; do
  dir=$work/cmake-static-$static
  cmake -S "$source_dir/examples" -B "$dir" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    -DARCOLL_EXAMPLES_STATIC=$static "${launchers[@]}" >"$work/configure.log" 2>&1 ||
    fail "examples do not configure against the install: $(cat "$work/configure.log")"
  cmake --build "$dir" >"$work/build.log" 2>&1 ||
    fail "examples do not build against the install (static $static): $(cat "$work/build.log")"
  for program in example_allreduce example_allreduce_c; do
    run_allreduce "$dir/$program"
  done
  for name in "${!example_ranks[@]}"; do
    run_example "${example_ranks[$name]}" "$dir/example_$name"
  done
  built=$(cd "$dir" && ls example_* | wc -l)
  ((built == ${#example_ranks[@]} + 2)) ||
    fail "examples built but not run here: $(cd "$dir" && ls example_*)"
done

# pkg-config, as a Makefile would use it.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cflags=$(pkg-config --cflags arcoll) || fail "pkg-config does not find arcoll"
libs=$(pkg-config --libs arcoll)
libdir=$(pkg-config --variable=libdir arcoll)
# shellcheck disable=SC2086
c++ -std=c++20 $cflags "$source_dir/examples/allreduce.cpp" -o "$work/allreduce" $libs \
  -Wl,-rpath,"$libdir" || fail "the C++ example does not build with pkg-config"
# shellcheck disable=SC2086
cc $cflags "$source_dir/examples/allreduce.c" -o "$work/allreduce_c" $libs -Wl,-rpath,"$libdir" ||
  fail "the C example does not build with pkg-config"
run_allreduce "$work/allreduce"
run_allreduce "$work/allreduce_c"

timeout 120 "$prefix/bin/arbench" --np 2 -b 8 -e 1K -f 8 -w 1 -n 2 >"$work/arbench.out" 2>&1 ||
  fail "the installed arbench failed: $(cat "$work/arbench.out")"
grep -q "Out of bounds values : 0 OK" "$work/arbench.out" ||
  fail "the installed arbench: $(cat "$work/arbench.out")"
echo "install: ok"
