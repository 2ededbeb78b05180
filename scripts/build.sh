#!/usr/bin/env bash
# Configures and builds arcoll (Release) in build/, or in ARCOLL_BUILD_DIR; only the targets
# in ARCOLL_BUILD_TARGETS (blank-separated) when set. Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${ARCOLL_BUILD_DIR:-build}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >"$dir-configure.log" \
  || { cat "$dir-configure.log"; exit 1; }
grep "arcoll component" "$dir-configure.log" | sed 's/^-- //'
targets=()
for t in ${ARCOLL_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$dir" --parallel 2 "${targets[@]}"
