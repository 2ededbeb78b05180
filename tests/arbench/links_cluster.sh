#!/usr/bin/env bash
# arbench links on emulated clusters of 2, 3 and 4 hosts where one host's link is shaped slower
# than the others: exactly the pairs of that host must be flagged, and that host named as the
# suspect; with a baseline or an expected rate on 2 hosts. Needs root and network namespaces
# (skipped, with the reason, where they are missing).
#
# Usage: bash links_cluster.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: links_cluster.sh path/to/arbench}
arbench=$(realpath "$arbench")
cluster=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../../scripts/cluster.sh")
export ARCOLL_TIMEOUT=30
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

if ((EUID != 0)); then
  echo "SKIPPED: network namespaces need root (running as uid $EUID)"
  exit 77
fi
# One host shaped 10x slower than the others. 3 and 4 hosts: each host is judged against the
# pairs between the other hosts, so exactly the slow host's pairs are flagged and it is named.
# 2 hosts: nothing to compare with but an earlier run (--baseline); without one, the link is
# measured and the output says it has no reference.
run_cluster() {  # NAME HOSTS CLUSTER-FLAGS... -- LINKS-FLAGS...
  local name=$1 hosts=$2 code=0
  shift 2
  local cluster_flags=()
  while [[ $1 != -- ]]; do cluster_flags+=("$1"); shift; done
  shift
  timeout 120 "$cluster" --quiet --hosts "$hosts" --ranks-per-host 1 --rate 1gbit "${cluster_flags[@]}" -- \
    "$arbench" links --bytes 1M --json "$work/$name.json" "$@" >"$work/$name.txt" 2>&1 || code=$?
  if ((code == 77)); then
    echo "SKIPPED: cluster.sh cannot emulate hosts here"
    exit 77
  fi
  ((code == 0)) || fail "$name: cluster.sh exited with $code: $(cat "$work/$name.txt")"
}
expect_slow_host() {  # NAME HOSTS SLOW-RANK
  "$python" - "$work/$1.json" "$2" "$3" <<'PY' || fail "$1: the flagged pairs: $(cat "$work/$1.txt")"
import json, sys
m = json.load(open(sys.argv[1]))
hosts, victim = int(sys.argv[2]), int(sys.argv[3])
slow = sorted((p["from"], p["to"]) for p in m["pairs"] if p["slow"])
expected = sorted([(victim, r) for r in range(hosts) if r != victim] +
                  [(r, victim) for r in range(hosts) if r != victim])
assert slow == expected, f"flagged {slow}, expected the pairs of rank {victim}: {expected}"
assert m["suspect_rank"] == victim, m["suspect_rank"]
PY
  grep -q "every slow pair involves rank $3" "$work/$1.txt" || fail "$1: no suspect line: $(cat "$work/$1.txt")"
}
run_cluster three 3 --slow 2=100mbit --
expect_slow_host three 3 2
grep -q "slow host: " "$work/three.txt" || fail "three: no slow host line: $(cat "$work/three.txt")"
run_cluster four 4 --slow 1=100mbit --
expect_slow_host four 4 1

run_cluster two_healthy 2 --
grep -q "reference: none for the link between the 2 hosts" "$work/two_healthy.txt" ||
  fail "two hosts without a baseline: $(cat "$work/two_healthy.txt")"
grep -q "no slow pair" "$work/two_healthy.txt" || fail "two healthy hosts: $(cat "$work/two_healthy.txt")"
run_cluster two_slow 2 --slow 1=100mbit -- --baseline "$work/two_healthy.json"
grep -q "reference: each pair against itself in $work/two_healthy.json" "$work/two_slow.txt" ||
  fail "two hosts with a baseline: $(cat "$work/two_slow.txt")"
"$python" - "$work/two_slow.json" <<'PY' || fail "two_slow: the flagged pairs: $(cat "$work/two_slow.txt")"
import json, sys
m = json.load(open(sys.argv[1]))
assert sorted((p["from"], p["to"]) for p in m["pairs"] if p["slow"]) == [(0, 1), (1, 0)], m["pairs"]
PY

# The rate the fabric should deliver, given by hand: two hosts at 100 Mbit/s against 1 Gbit/s
# expected are slow (and the slow host of three is found by it too).
run_cluster two_expect 2 --slow 1=100mbit -- --expect 1gbit
grep -q "reference: the expected rate between hosts, 0.125 GB/s (--expect)" "$work/two_expect.txt" ||
  fail "two hosts with --expect: $(cat "$work/two_expect.txt")"
"$python" - "$work/two_expect.json" <<'PY' || fail "two_expect: the flagged pairs: $(cat "$work/two_expect.txt")"
import json, sys
m = json.load(open(sys.argv[1]))
assert sorted((p["from"], p["to"]) for p in m["pairs"] if p["slow"]) == [(0, 1), (1, 0)], m["pairs"]
assert m["nic_mbps"] == [-1, -1], m["nic_mbps"]  # veth: no driver, its speed means nothing
PY
run_cluster three_expect 3 --slow 0=100mbit -- --expect 1gbit
expect_slow_host three_expect 3 0

echo "links on emulated clusters: ok"
