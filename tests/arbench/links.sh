#!/usr/bin/env bash
# arbench links: the pairwise matrix on forked ranks, and bad flags and baselines refused (the
# emulated clusters with a slow host: links_cluster.sh).
#
# Usage: bash links.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: links.sh path/to/arbench}
arbench=$(realpath "$arbench")
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

# A baseline that is not a links file, or of another size, is refused; so is a rate that is not one.
expect_usage_error_of "--expect: 'fast' is not a rate" "$arbench" links --np 2 --expect fast
echo '{"schema": "other"}' >"$work/bad_baseline.json"
expect_usage_error_of "--baseline: $work/bad_baseline.json: not an arbench links --json file" \
  "$arbench" links --np 2 --baseline "$work/bad_baseline.json"
expect_usage_error_of "holds 3 ranks, this job 2" "$arbench" links --np 2 --bytes 64K --baseline "$work/local.json"
echo "links: ok"
