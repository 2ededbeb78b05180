#!/usr/bin/env bash
# The torch suite (tests/torch/) on torch 2.x: Debian 13's, in the root scripts/debian13.sh
# keeps outside the clone. Inside it the project's own scripts install what the backend needs,
# build the library and the module (build-debian13/, kept between runs) and run the suite.
# --prepare: all but the suite (test.sh runs that part early, at idle priority, beside the
# sanitized suite). Exit 77 (skipped, saying why) where this machine cannot make the root.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=run
if [ "${1:-}" = "--prepare" ]; then
  mode=prepare
  shift
fi
exec scripts/debian13.sh bash -c '
  set -euo pipefail
  mode=$1
  shift
  scripts/install-deps.sh --torch
  ARCOLL_BUILD_DIR=build-debian13 ARCOLL_BUILD_TARGETS=arcoll_torch scripts/build.sh \
    -DARCOLL_BUILD_BENCH=OFF
  [ "$mode" = prepare ] && exit 0
  python3 -c "import torch; print(\"torch\", torch.__version__)"
  ctest --test-dir build-debian13 -L torch --output-on-failure --timeout 600 --parallel 2 "$@"' \
  torch2 "$mode" "$@"
