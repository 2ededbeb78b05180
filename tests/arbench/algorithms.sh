#!/usr/bin/env bash
# End-to-end check of the cost-model tools: `arbench tune` writes a tuning file, --tuning reads
# it, --algo all prints every algorithm with its prediction and checks each, --wire f16 reports
# errors within the wire's bound, and bad tuning files or flags exit 2 naming what is wrong.
#
# Usage: bash algorithms.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: algorithms.sh path/to/arbench}
export ARCOLL_TIMEOUT=30
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

timeout 60 "$arbench" tune --np 3 -o "$work/tuning.json" >"$work/tune.txt" ||
  fail "arbench tune exited with $?"

timeout 120 "$arbench" --np 3 --tuning "$work/tuning.json" --algo all -b 8 -e 64K -f 8 -w 1 -n 2 \
  -d f32,i32 -o sum,max --json "$work/all.json" >"$work/all.txt" ||
  fail "arbench --algo all exited with $?"

# Reduce's algorithms, each at sizes on the boards, direct, the ring and halving-doubling.
timeout 120 "$arbench" --np 3 --coll reduce --tuning "$work/tuning.json" --algo all -b 8 -e 4M \
  -f 64 -w 1 -n 2 --json "$work/reduce.json" >"$work/reduce.txt" ||
  fail "arbench --coll reduce --algo all exited with $?"

timeout 120 "$arbench" --np 3 --wire f16 --algo ring,tree -b 4K -e 1M -f 16 -w 1 -n 2 -d f32 \
  -o sum,avg --json "$work/wire.json" >"$work/wire.txt" || fail "arbench --wire f16 exited with $?"

"$python" - "$work" <<'PY'
import json, sys
work = sys.argv[1]
errors = []
tuning = json.load(open(f"{work}/tuning.json"))
# Three ranks on one host: one transport, the one within the host, printed and saved.
if tuning.get("format") != "arcoll-tuning" or len(tuning.get("transports", {})) != 1:
    errors.append(f"tuning file: {tuning}")
else:
    [(name, costs)] = tuning["transports"].items()
    if name not in open(f"{work}/tune.txt").read():
        errors.append(f"tune printed no {name} line")
    for key in ("latency_us", "bandwidth_gbs", "reduce_gbs", "cached_bandwidth_gbs",
                "cached_reduce_gbs", "small_bandwidth_gbs"):
        if not costs[key] > 0:
            errors.append(f"tuning {name}.{key} = {costs[key]}")

run = json.load(open(f"{work}/all.json"))
backends = {r["backend"] for r in run["rows"]}
for algorithm in ("ring", "multi_ring", "recursive_doubling", "halving_doubling", "tree",
                  "hierarchical", "torus2d", "ps", "auto"):
    if f"arcoll/{algorithm}" not in backends:
        errors.append(f"--algo all ran no arcoll/{algorithm} rows ({sorted(backends)})")
for r in run["rows"]:
    if not (r["predicted_us"] or 0) > 0:
        errors.append(f"no prediction: {r['backend']} {r['size_bytes']}")
    for group in ("out_of_place", "in_place"):
        if r[group]["wrong"] != 0:
            errors.append(f"{r['backend']} {r['type']} {r['op']} {r['size_bytes']}: wrong {r[group]['wrong']}")
text = open(f"{work}/all.txt").read()
if "predicted" not in text or "auto=" not in text:
    errors.append("--algo all's table lacks the predicted column or auto's choice")

reduce = json.load(open(f"{work}/reduce.json"))
backends = {r["backend"] for r in reduce["rows"]}
if backends != {f"arcoll/{a}" for a in ("board", "direct", "halving_doubling", "ring", "auto")}:
    errors.append(f"--coll reduce --algo all ran {sorted(backends)}")
for r in reduce["rows"]:
    if r["collective"] != "reduce" or not (r["predicted_us"] or 0) > 0:
        errors.append(f"reduce row without a prediction: {r['backend']} {r['size_bytes']}")
    if r["out_of_place"]["wrong"] != 0 or r["in_place"]["wrong"] != 0:
        errors.append(f"reduce row {r['backend']} {r['size_bytes']} is wrong")

wire = json.load(open(f"{work}/wire.json"))
if wire["metadata"]["wire"] != "f16":
    errors.append(f"metadata.wire = {wire['metadata']['wire']}")
bound = (2 * 3 + 1) * 2.0 ** -11
for r in wire["rows"]:
    for group in ("out_of_place", "in_place"):
        g = r[group]
        if g["wrong"] != 0 or "max_abs_error" not in g:
            errors.append(f"wire row {r['backend']} {r['size_bytes']}: {g}")
        elif not (0 < g["max_rel_error"] <= bound):
            errors.append(f"wire row {r['backend']} {r['size_bytes']}: relative error {g['max_rel_error']} outside (0, {bound}]")
if errors:
    print("\n".join(errors[:20]))
    sys.exit(1)
PY

# Bad input: exit 2 with a message naming the file and the field or the flag.
echo '{"format": "arcoll-tuning", "version": 1, "transports": {"loopback": {"latency_us": 2, "bandwidth_gbs": -1, "reduce_gbs": 5}}}' >"$work/bad.json"
expect_usage_error_of "transports.loopback.bandwidth_gbs" "$arbench" --np 2 --tuning "$work/bad.json" -b 8 -e 8
echo '{"format": "arcoll-tuning", "version": 1' >"$work/broken.json"
expect_usage_error_of "not valid JSON" "$arbench" --np 2 --tuning "$work/broken.json" -b 8 -e 8
expect_usage_error_of "cannot be read" "$arbench" --np 2 --tuning "$work/missing.json" -b 8 -e 8
expect_usage_error_of "--wire" "$arbench" --np 2 --wire f8 -b 8 -e 8
expect_usage_error_of "no_such" "$arbench" --np 2 --algo ring,no_such -b 8 -e 8
expect_usage_error_of "unknown transport 'pigeon'" "$arbench" --np 2 --transport shm+pigeon \
  -b 8 -e 8
expect_usage_error_of "shm reaches ranks of one host only" "$arbench" --np 2 --transport tcp,tcp+shm \
  -b 8 -e 8
expect_usage_error_of "shm reaches ranks of one host only" "$arbench" tune --np 2 --transport tcp+shm
# The sweep's options before a tool's name would go unread: tune would measure its defaults.
expect_usage_error_of "--transport is the sweep's option" "$arbench" --transport tcp tune --np 2
echo "algorithms: ok"
