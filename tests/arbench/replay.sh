#!/usr/bin/env bash
# arbench replay on 4 local ranks: each policy once (the algorithms and wire formats in turn),
# the report's lines, and bad flags rejected with exit 2 naming the flag.
#
# Usage: bash replay.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: replay.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

run() {  # policy algorithm wire
  "$arbench" replay --np 4 --model googlenet --batch 2 --iters 3 --warmup 1 --policy "$1" \
    --algo "$2" --wire "$3" >"$work/replay.txt" 2>&1 || fail "replay $*: $(cat "$work/replay.txt")"
  for text in "googlenet, 173 tensors, 6624904 parameters" "policy $1" "algorithm $2, wire $3" \
    "samples/s"; do
    grep -qF -- "$text" "$work/replay.txt" || fail "replay $*: no '$text' in: $(cat "$work/replay.txt")"
  done
}
run sync-after-backward ring f32
run wfbp hierarchical f16
run buckets auto f32
run fusion ring f16

# The timeline: Chrome trace events as the format documents them (traceEvents of complete
# "X" events with ts and dur in microseconds, "M" metadata naming processes and threads).
"$arbench" replay --np 4 --model googlenet --batch 2 --iters 2 --warmup 1 --trace "$work/trace.json" \
  >"$work/replay.txt" 2>&1 || fail "replay --trace: $(cat "$work/replay.txt")"
"$python" - "$work/trace.json" <<'PY' || fail "trace: $(head -c 2000 "$work/trace.json")"
import json, sys
trace = json.load(open(sys.argv[1]))
events = trace["traceEvents"]
assert isinstance(events, list) and events
ranks = set()
for e in events:
    assert isinstance(e["name"], str) and e["ph"] in ("X", "M"), e
    assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    if e["ph"] == "X":
        assert e["ts"] >= 0 and e["dur"] >= 0, e
        ranks.add(e["pid"])
    else:
        assert e["name"] in ("process_name", "thread_name") and e["args"]["name"], e
assert ranks == {0, 1, 2, 3}, ranks
names = {e["name"].split()[0] for e in events if e["ph"] == "X"}
assert names == {"forward", "backward", "all-reduce"}, names
PY

expect_usage_error_of "parameter-server" "$arbench" replay --np 2 --policy ps
expect_usage_error_of "unknown model" "$arbench" replay --np 2 --model lenet
expect_usage_error_of "unknown device profile" "$arbench" replay --np 2 --profile tpu
expect_usage_error_of "--batch" "$arbench" replay --np 2 --batch 0
expect_usage_error_of "--wire" "$arbench" replay --np 2 --wire f8
echo "replay: ok"
