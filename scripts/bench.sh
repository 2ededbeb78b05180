#!/usr/bin/env bash
# README command 1: install dependencies, build, run arbench's default job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
# What the job runs (the library, arbench, its train program and the torch module where their
# libraries are found), not the test programs: scripts/test.sh builds those in build-test/.
scripts/build.sh -DARCOLL_BUILD_TESTS=OFF
build/bench/arbench "$@"
