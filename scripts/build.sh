#!/usr/bin/env bash
# Configures and builds arcoll in build/ (Release). Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >build-configure.log \
  || { cat build-configure.log; exit 1; }
grep "arcoll component" build-configure.log | sed 's/^-- //'
cmake --build build --parallel 2
