#!/usr/bin/env bash
# README command 2: install dependencies, build, run the whole test suite, then the store
# under ThreadSanitizer and the fuzzers.
# The suite runs on a build with AddressSanitizer, LeakSanitizer and UndefinedBehaviorSanitizer
# (build-test/): every test, multi-process ones included, is also a check for memory errors,
# leaks and undefined behaviour, any of which fails it. scripts/bench.sh's build/ stays a
# plain optimized build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# The last step's Debian 13 root is made (once), given its packages and the module built there
# while the suite builds and runs: at idle priority, it takes only what the suite leaves (the
# mirror's and the disk's time, the cores while tests wait), and never a test's core.
torch2_log=$(mktemp)
chrt --idle 0 scripts/test-torch2.sh --prepare >"$torch2_log" 2>&1 &
torch2_root=$!
trap 'kill "$torch2_root" 2>/dev/null || true; rm -f "$torch2_log"' EXIT
ARCOLL_BUILD_DIR=build-test scripts/build.sh -DARCOLL_SANITIZE=address,undefined
export LSAN_OPTIONS="suppressions=$PWD/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1"
ctest --test-dir build-test --output-on-failure --timeout 600 --parallel 2 "$@"
scripts/tsan.sh
scripts/fuzz.sh
# The torch suite once more, on torch 2.x in a Debian 13 root made once and kept outside the
# clone; skipped (77) where the root cannot be made.
status=0
wait "$torch2_root" || status=$?
cat "$torch2_log"
[ "$status" -eq 0 ] && { scripts/test-torch2.sh || status=$?; }
if [ "$status" -eq 77 ]; then
  echo "test.sh: the torch suite on torch 2.x was skipped (see above)"
elif [ "$status" -ne 0 ]; then
  exit "$status"
fi
