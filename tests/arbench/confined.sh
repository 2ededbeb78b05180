#!/usr/bin/env bash
# Ranks confined to fewer cores than there are of them (taskset, a container's cpuset) count as
# more ranks than cores, however many the machine has: their waits yield between polls, and
# results stay right. Ranks free to run on every core of a machine with a core per rank do not.
#
# Usage: bash confined.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: confined.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

command -v taskset >/dev/null || { echo "SKIP: no taskset"; exit 77; }
export ARCOLL_LOG=debug ARCOLL_CALIBRATE=off
unset ARCOLL_BUSY_POLL_US  # a busy-poll time set by hand never yields
says="waits yield between polls"
first_cpu=$("$python" -c 'import os; print(min(os.sched_getaffinity(0)))')
run() {
  timeout 120 "$@" "$arbench" --np 2 --coll allreduce,broadcast -b 8 -e 64K -f 8 -n 20 -w 2 \
    >"$work/out.txt" 2>"$work/err.txt" || fail "$* arbench exited with $?: $(cat "$work/err.txt")"
  grep -q "communicator ready" "$work/err.txt" || fail "no debug line: $(cat "$work/err.txt")"
}
run taskset -c "$first_cpu"
[[ $(grep -c "$says" "$work/err.txt") -eq 2 ]] || fail "on one core: $(cat "$work/err.txt")"
if (($(nproc) >= 2)); then  # the CPUs this process may run on
  run env
  ! grep -q "$says" "$work/err.txt" || fail "on $(nproc) cores: $(cat "$work/err.txt")"
fi
