#!/usr/bin/env bash
# arbench links: the pairwise matrix on forked ranks, and on an emulated cluster of 5 hosts
# where one host's link is shaped 5x slower than the others: exactly the pairs of that host
# must be flagged, and that host named as the suspect. The cluster part needs root (skipped
# with the reason otherwise, exit 77 when nothing could run).
#
# Usage: bash links.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: links.sh path/to/arbench}
arbench=$(realpath "$arbench")
cluster=$(realpath "$(dirname "${BASH_SOURCE[0]}")/../../scripts/cluster.sh")
export ARCOLL_TIMEOUT=30
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

timeout 60 "$arbench" links --np 3 --bytes 256K --json "$work/local.json" >"$work/local.txt" ||
  fail "arbench links --np 3 exited with $?"
"$python" - "$work/local.json" <<'PY' || fail "local matrix: $(cat "$work/local.txt")"
import json, sys
m = json.load(open(sys.argv[1]))
assert m["ranks"] == 3 and len(m["pairs"]) == 6, m
assert all(p["latency_us"] > 0 and p["bandwidth_gbs"] > 0 for p in m["pairs"]), m["pairs"]
PY

if ((EUID != 0)); then
  echo "SKIPPED (cluster part): network namespaces need root (running as uid $EUID)"
  exit 0
fi
code=0
timeout 120 "$cluster" --quiet --hosts 5 --ranks-per-host 1 --rate 1gbit --slow 3=200mbit -- \
  "$arbench" links --bytes 1M --json "$work/cluster.json" >"$work/cluster.txt" 2>&1 || code=$?
cat "$work/cluster.txt"
if ((code == 77)); then
  echo "SKIPPED (cluster part): cluster.sh cannot emulate hosts here"
  exit 0
fi
((code == 0)) || fail "cluster.sh exited with $code"
"$python" - "$work/cluster.json" <<'PY' || fail "the flagged pairs"
import json, sys
m = json.load(open(sys.argv[1]))
slow = sorted((p["from"], p["to"]) for p in m["pairs"] if p["slow"])
expected = sorted([(3, r) for r in range(5) if r != 3] + [(r, 3) for r in range(5) if r != 3])
assert slow == expected, f"flagged {slow}, expected the pairs of rank 3: {expected}"
assert m["suspect_rank"] == 3, m["suspect_rank"]
PY
grep -q "every slow pair involves rank 3" "$work/cluster.txt" || fail "no suspect line"
echo "links: ok"
