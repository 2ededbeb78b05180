#!/usr/bin/env bash
# arbench replay on 4 local ranks: each policy once (the algorithms and wire formats in turn),
# the report's lines, a sweep and its JSON, the timeline, a recorded communication trace
# replayed both ways, and bad flags and files rejected with exit 2 naming what is wrong.
#
# Usage: bash replay.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: replay.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

run() {  # policy algorithm wire
  "$arbench" replay --np 4 --model googlenet --batch 2 --iters 3 --warmup 1 --policy "$1" \
    --algo "$2" --wire "$3" >"$work/replay.txt" 2>&1 || fail "replay $*: $(cat "$work/replay.txt")"
  for text in "googlenet, 173 tensors, 6624904 parameters" "policy $1" "$2, $3:" "samples/s" \
    "the model's prediction"; do
    grep -qF -- "$text" "$work/replay.txt" || fail "replay $*: no '$text' in: $(cat "$work/replay.txt")"
  done
}
run sync-after-backward ring f32
run wfbp hierarchical f16
run buckets auto f32
run fusion ring f16
run ps auto f32

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

# A sweep: every combination run, ranked, the default among them, and the same in JSON.
"$arbench" replay --np 2 --model googlenet --batch 2 --iters 2 --warmup 1 --sweep \
  --policy buckets,sync-after-backward --bucket-bytes 1M,4M --algo ring,auto --wire f32 \
  --json "$work/sweep.json" >"$work/sweep.txt" 2>&1 || fail "replay --sweep: $(cat "$work/sweep.txt")"
grep -q "^# 7 configurations, ranked" "$work/sweep.txt" || fail "sweep: $(cat "$work/sweep.txt")"
grep -q "^# best for googlenet here: " "$work/sweep.txt" || fail "sweep: $(cat "$work/sweep.txt")"
"$python" - "$work/sweep.json" <<'PY' || fail "sweep JSON: $(head -c 3000 "$work/sweep.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "arbench.replay/1" and j["ranks"] == 2 and not j["simulated"], j
results = j["results"]
labels = sorted(r["configuration"] for r in results)
expected = sorted([f"buckets of {b}, {a}, f32" for b in ("1 MiB", "4 MiB") for a in ("ring", "auto")]
                  + [f"sync-after-backward, {a}, f32" for a in ("ring", "auto")]
                  + ["buckets of 25 MiB, auto, f32"])
assert labels == expected, labels
assert results[j["baseline"]]["configuration"] == "buckets of 25 MiB, auto, f32"
for r in results:
    m, p = r["measured"], r["predicted"]
    assert len(m["iterations_ms"]) == 2 and m["p50_ms"] > 0 and m["iteration_ms"] >= m["compute_ms"] > 0, r
    assert p["iteration_ms"] >= p["compute_ms"] > 0 and 0 <= p["overlap"] <= 1, r
    assert sum(r["allreduce_bytes"]) == 4 * 6624904, r  # every gradient, once
    assert abs(r["prediction_error"] - (p["iteration_ms"] - m["iteration_ms"]) / m["iteration_ms"]) < 1e-9
PY
# The same sweep predicted for a described cluster, without ranks.
"$arbench" replay --simulate --topology "$source_dir/examples/topologies/p40-256x4-100g-ib.json" \
  --model resnet50 --profile p40 --sweep --algo ring,hierarchical >"$work/simulate.txt" 2>&1 ||
  fail "replay --simulate --sweep: $(cat "$work/simulate.txt")"
grep -q "^# 29 configurations, ranked by predicted" "$work/simulate.txt" ||
  fail "simulated sweep: $(cat "$work/simulate.txt")"

# A recorded trace (PARAM's basic format), time-faithfully and back to back: every kind of call
# counted (all-to-all among them), nothing left out, each latency in the JSON.
traces="$source_dir/examples/comms-traces/ddp-4ranks"
for mode in "" --back-to-back; do
  "$arbench" replay --np 4 --comms-trace "$traces" $mode --json "$work/trace-$mode.json" \
    >"$work/comms.txt" 2>&1 || fail "replay --comms-trace $mode: $(cat "$work/comms.txt")"
  ! grep -q "left out" "$work/comms.txt" || fail "comms trace left calls out: $(cat "$work/comms.txt")"
  "$python" - "$work/trace-$mode.json" "$mode" <<'PY' || fail "comms JSON: $(head -c 3000 "$work/trace-$mode.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["schema"] == "arbench.comms-trace/1" and j["ranks"] == 4, j
assert j["mode"] == ("back-to-back" if sys.argv[2] else "time-faithful"), j["mode"]
counts = {c["name"]: c["calls"] for c in j["collectives"]}
assert counts == {"broadcast": 1, "all_reduce": 12, "all_gather": 3, "reduce_scatter": 3, "barrier": 3, "all_to_all": 3}, counts
assert len(j["calls"]) == 25 and all(c["latency_us"] > 0 for c in j["calls"]), j["calls"]
for c in j["collectives"]:
    assert c["p50_us"] <= c["p95_us"] <= c["max_us"], c
if not sys.argv[2]:  # time-faithful: the replay lasts at least as long as the recording
    assert j["replay_ms"] >= j["recorded_ms"] > 0, j
PY
done
# Bad traces: each rank's error names its file, entry and field, and the job exits 2.
mkdir -p "$work/bad"
check_bad_trace() {  # expected-text json-of-rank-1
  printf '%s' '[{"comms": "barrier"}]' >"$work/bad/rank0.json"
  printf '%s' "$2" >"$work/bad/rank1.json"
  expect_usage_error_of "$1" "$arbench" replay --np 2 --comms-trace "$work/bad" --back-to-back
}
check_bad_trace "rank1.json: the file: not JSON" '[{"comms": "all_reduce",'
check_bad_trace "entry 0: no \"in_msg_size\"" '[{"comms": "all_reduce", "out_msg_size": 4, "dtype": "float"}]'
check_bad_trace "entry 1: unknown dtype" '[{"comms": "barrier"}, {"comms": "all_reduce", "in_msg_size": 4, "out_msg_size": 4, "dtype": "quaternion"}]'
check_bad_trace "replay it with as many ranks" '[{"comms": "barrier", "world_size": 4}]'
expect_usage_error_of "rank7.json: the file: cannot be read" "$arbench" replay --np 8 --comms-trace "$traces"
expect_usage_error_of "needs --sweep" "$arbench" replay --np 2 --algo ring,tree
expect_usage_error_of "--trace: a timeline" "$arbench" replay --np 2 --sweep --trace "$work/t.json"
expect_usage_error_of "unknown model" "$arbench" replay --np 2 --model lenet
expect_usage_error_of "unknown device profile" "$arbench" replay --np 2 --profile tpu
expect_usage_error_of "--batch" "$arbench" replay --np 2 --batch 0
expect_usage_error_of "--wire" "$arbench" replay --np 2 --wire f8
echo "replay: ok"
