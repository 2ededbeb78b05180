#!/usr/bin/env bash
# Builds the rendezvous store and its tests with ThreadSanitizer (tests/sanitizers/) into
# build-tsan/ and runs them: a data race fails the run. The store's server is the only thread
# arcoll starts; the transports run in the caller's thread.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S tests/sanitizers -B build-tsan -G Ninja >/dev/null
cmake --build build-tsan --parallel 2 >/dev/null
TSAN_OPTIONS="halt_on_error=1" build-tsan/store_tsan --gtest_brief=1
echo "tsan: store tests passed under ThreadSanitizer"
