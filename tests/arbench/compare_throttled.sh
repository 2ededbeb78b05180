#!/usr/bin/env bash
# A regression made on purpose is caught: the same sweep over two emulated hosts
# (scripts/cluster.sh) on 1 Gbit/s links, again on 1 Gbit/s, and on links throttled to
# 250 Mbit/s by tc. arbench compare passes the rerun and fails the throttled run with exit 1.
# Messages of 1 MiB and more keep the link, not the cores, the bottleneck (smaller ones vary
# with tc's bursts): the rerun must time like the run, within 25% (an unchanged rerun on these
# links once timed 4 MiB 14% slower with its repetitions 11.5% apart; the throttled run loses
# about 75%).
# Skipped (77) where namespaces cannot be made (not root, unprivileged container).
#
# Usage: bash compare_throttled.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: compare_throttled.sh path/to/arbench}
arbench=$(realpath "$arbench")
export ARCOLL_TIMEOUT=30
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

sweep() {  # rate output
  on_cluster --quiet --hosts 2 --ranks-per-host 1 --rate "$1" -- \
    "$arbench" -b 1M -e 4M -f 4 -n 3 -w 1 --repeat 3 --json "$2"
}
sweep 1gbit "$work/base.json"
sweep 1gbit "$work/rerun.json"
sweep 250mbit "$work/throttled.json"

status=0
"$arbench" compare --threshold 25% "$work/base.json" "$work/rerun.json" >"$work/same.txt" || status=$?
cat "$work/same.txt"
((status == 0)) || fail "the unchanged rerun was flagged (exit $status)"
status=0
"$arbench" compare --threshold 25% "$work/base.json" "$work/throttled.json" >"$work/slow.txt" || status=$?
cat "$work/slow.txt"
((status == 1)) || fail "the throttled run was not flagged (exit $status)"
# The largest size, the steadiest, regressed by about the 4x the link lost.
grep -E "^ +4194304 .*REGRESSED" "$work/slow.txt" >/dev/null || fail "the 4 MiB row did not regress"
echo "compare_throttled: ok"
