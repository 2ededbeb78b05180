#!/usr/bin/env bash
# Builds the rendezvous store, the work queue and their tests with ThreadSanitizer
# (tests/sanitizers/) into build-tsan/ and runs them: a data race fails the run. The store's
# server and the progress thread of non-blocking calls are the threads arcoll starts; the
# transports run in the thread that runs the call.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S tests/sanitizers -B build-tsan -G Ninja >/dev/null
cmake --build build-tsan --parallel 2 >/dev/null
TSAN_OPTIONS="halt_on_error=1" build-tsan/store_tsan --gtest_brief=1
TSAN_OPTIONS="halt_on_error=1" build-tsan/work_queue_tsan --gtest_brief=1
echo "tsan: store and work queue tests passed under ThreadSanitizer"
