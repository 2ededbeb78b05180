#!/usr/bin/env bash
# README command 1: install dependencies, build, run arbench's default job.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/bench/arbench "$@"
