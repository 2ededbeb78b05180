#!/usr/bin/env bash
# End-to-end check of every collective arbench measures (--coll): rows for each on 3 ranks
# checked against the reference, nccl-tests' sizes, roots and bus-bandwidth factors, the
# collectives that move data printed without an operator; the same through MPI and Gloo where
# they are built (Gloo skipping what it lacks, with the reason); bad --coll values exit 2.
#
# Usage: bash collectives.sh path/to/arbench
set -euo pipefail

arbench=${1:?usage: collectives.sh path/to/arbench}
# shellcheck source=lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

timeout 120 "$arbench" --np 3 --coll all -b 8 -e 64K -f 8 -w 1 -n 2 -d f32,i8,bf16 -o sum,max \
  --json "$work/all.json" >"$work/all.txt" 2>&1 || fail "arbench --coll all: $(cat "$work/all.txt")"

# The peers this arbench was built with (exit 2 and "built without" otherwise).
have() {
  local code=0
  "$arbench" --np 1 --backend "$1" -b 8 -e 8 -n 1 -w 0 >"$work/probe.txt" 2>&1 || code=$?
  ! { ((code == 2)) && grep -q "built without" "$work/probe.txt"; }
}
peers=""
if have mpi && command -v mpirun >/dev/null; then peers=mpi; fi
if have gloo; then peers=${peers:+$peers,}gloo; fi
if [[ -n $peers ]]; then
  timeout 240 "$arbench" --np 3 --coll all --compare "$peers" -b 8 -e 32K -f 64 -w 1 -n 2 -d f32 \
    --json "$work/peers.json" >"$work/peers.txt" 2>&1 ||
    fail "arbench --coll all --compare $peers: $(cat "$work/peers.txt")"
fi

"$python" - "$work" "$peers" <<'PY'
import json, sys
work, peers = sys.argv[1], [p for p in sys.argv[2].split(",") if p]
errors = []
n = 3
factor = {"allreduce": 2 * (n - 1) / n, "broadcast": 1, "reduce": 1, "sendrecv": 1}
split = {"allgather", "reduce_scatter", "alltoall", "gather", "scatter"}
rooted = {"broadcast", "reduce", "gather", "scatter"}
reducing = {"allreduce", "reduce_scatter", "reduce"}
colls = ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "gather",
         "scatter", "sendrecv"]

def check(path, backends):
    run = json.load(open(path))
    rows = run["rows"]
    for backend in backends:
        seen = {r["collective"] for r in rows if r["backend"] == backend}
        expected = set(colls) - ({"reduce_scatter", "sendrecv"} if backend == "gloo" else set())
        if seen != expected:
            errors.append(f"{path}: {backend} ran {sorted(seen)}, not {sorted(expected)}")
    for r in rows:
        c = r["collective"]
        where = f"{r['backend']} {c} {r['type']} {r['op']} {r['size_bytes']}"
        if c in split and r["count"] % n:
            errors.append(f"{where}: count {r['count']} is not a multiple of {n}")
        if r["root"] != (0 if c in rooted else -1):
            errors.append(f"{where}: root {r['root']}")
        if (r["op"] == "none") == (c in reducing):
            errors.append(f"{where}: op {r['op']}")
        for group in ("out_of_place", "in_place"):
            g = r[group]
            if g["wrong"] != 0:
                errors.append(f"{where} {group}: {g['wrong']} wrong")
            if g["algbw_gbs"] > 0:
                want = factor.get(c, (n - 1) / n)
                if abs(g["busbw_gbs"] / g["algbw_gbs"] - want) > 1e-6:
                    errors.append(f"{where}: busbw/algbw {g['busbw_gbs'] / g['algbw_gbs']}, not {want}")

check(f"{work}/all.json", ["arcoll"])
text = open(f"{work}/all.txt").read()
for c in colls:
    if f"# {c}\n" not in text:
        errors.append(f"the table has no '# {c}' line")
if peers:
    check(f"{work}/peers.json", ["arcoll"] + peers)
    if "gloo" in peers and "# gloo: reduce_scatter f32 sum skipped: " not in open(f"{work}/peers.txt").read():
        errors.append("no line for Gloo's missing reduce_scatter")
if errors:
    print("\n".join(errors[:20]))
    sys.exit(1)
PY

expect_usage_error_of "--coll: unknown name 'allgatherv'" "$arbench" --np 2 --coll allgatherv -b 8 -e 8
# Buffers past this host's memory are refused before the header, not a bad_alloc mid-run;
# timeouts past a week (which would overflow the clock) likewise.
expect_usage_error_of "do not fit in this host's" "$arbench" --np 2 -b 8 -e 1T
expect_usage_error_of "K, M, G or T suffix" "$arbench" --np 2 -b 8 -e 1P
expect_usage_error_of "--timeout: '1e10' is not a positive number of seconds of at most 604800" \
  "$arbench" --np 2 -b 8 -e 8 --timeout 1e10
expect_usage_error_of "ARCOLL_TIMEOUT='1e10' must be a positive number of seconds" \
  env ARCOLL_TIMEOUT=1e10 "$arbench" --np 2 -b 8 -e 8
expect_usage_error_of "give one --coll (not sendrecv)" "$arbench" --np 2 --coll allgather,reduce --algo all -b 8 -e 8
expect_usage_error_of "give one --coll (not sendrecv)" "$arbench" --np 2 --coll sendrecv --algo all -b 8 -e 8
expect_usage_error_of "unknown reduce algorithm 'tree'" "$arbench" --np 2 --coll reduce --algo tree,ring -b 8 -e 8
echo "collectives: ok"
