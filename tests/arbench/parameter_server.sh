#!/usr/bin/env bash
# The parameter server through arbench: --algo ps checked against the reference for every type
# (a share in every worker, and dedicated --ps-servers ranks), its cost model in --algo and
# plan, arbench train with ps-bsp (the all-reduce's weights), ps-asp and ps-ssp, colocated and
# dedicated, and bad flags refused (server hosts of their own: parameter_server_cluster.sh).
# Usage: parameter_server.sh ARBENCH
set -euo pipefail
arbench=$1
source "$(dirname "$0")/lib/common.sh"
source_dir=$(cd "$(dirname "$0")/../.." && pwd)

# Every type through a colocated parameter server, and dedicated servers beside ring.
"$arbench" --np 3 --algo ps -d all -b 8 -e 256K -f 16 -n 3 -w 1 >"$work/ps.txt" 2>&1 ||
  fail "--algo ps: $(cat "$work/ps.txt")"
grep -q "Out of bounds values : 0 OK" "$work/ps.txt" || fail "--algo ps results: $(cat "$work/ps.txt")"
for type in f32 f64 f16 bf16 i8 u8 i32 i64; do
  grep -qE "^ +[0-9]+ +[0-9]+ +$type +sum +ps " "$work/ps.txt" || fail "no $type row: $(cat "$work/ps.txt")"
done
"$arbench" --np 2 --ps-servers 2 --ps-piece 64K --algo ps,ring -b 1K -e 1M -f 32 -n 3 -w 1 \
  --json "$work/dedicated.json" \
  >"$work/dedicated.txt" 2>&1 || fail "--ps-servers 2: $(cat "$work/dedicated.txt")"
$python - "$work/dedicated.json" <<'PY' || fail "dedicated servers' rows: $(cat "$work/dedicated.txt")"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
ps = [r for r in rows if r["backend"] == "arcoll/ps"]
assert len(ps) == 3 and all(r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0 for r in ps), ps
assert all(r["predicted_us"] and r["predicted_us"] > 0 for r in ps), ps
PY

# The cost model beside the all-reduce algorithms on a described cluster.
"$arbench" plan --topology "$source_dir/examples/topologies/cpu-cluster-10gbe.json" --ps-servers 0,4 \
  -b 1M -e 64M -f 8 >"$work/plan.txt" 2>&1 || fail "plan --ps-servers: $(cat "$work/plan.txt")"
grep -qE " +ps +ps/4 " "$work/plan.txt" || fail "plan has no ps columns: $(cat "$work/plan.txt")"

# Training through parameter servers: ps-bsp gives the all-reduce's weights; asp and ssp train.
"$arbench" train --np 2 --backends arcoll,ps-bsp,ps-asp,ps-ssp:1 --steps 20 --epochs 1 --test-images 500 \
  --json "$work/train.json" >"$work/train.txt" 2>&1 || fail "train through ps: $(cat "$work/train.txt")"
"$arbench" train --np 2 --ps-servers 1 --backends ps-bsp,ps-ssp:0 --steps 12 --epochs 1 --test-images 500 \
  --json "$work/train_dedicated.json" >"$work/train_dedicated.txt" 2>&1 ||
  fail "train through a dedicated server: $(cat "$work/train_dedicated.txt")"
$python - "$work/train.json" "$work/train_dedicated.json" <<'PY' || fail "ps training: $(cat "$work/train.txt")"
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert [r["backend"] for r in runs] == ["arcoll", "ps-bsp", "ps-asp", "ps-ssp:1"], runs
assert runs[1]["weights_max_difference"] < 1e-4, runs[1]
for r in runs:
    assert r["final_accuracy"] > 0.2 and len(r["curve"]) == 1, r  # chance: 0.1
dedicated = json.load(open(sys.argv[2]))["runs"]
assert [r["backend"] for r in dedicated] == ["ps-bsp", "ps-ssp:0"], dedicated
PY

expect_usage_error_of "--ps-servers serves --algo ps" "$arbench" --np 2 --ps-servers 1 -b 8 -e 8
expect_usage_error_of "--ps-piece must be larger than 0 bytes" "$arbench" --np 2 --algo ps --ps-piece 0
expect_usage_error_of "the mpi backend runs on all of MPI_COMM_WORLD" \
  "$arbench" train --np 2 --ps-servers 1 --backends ps-bsp,mpi
expect_usage_error_of "ps-ssp:K needs K" "$arbench" train --np 2 --backends ps-ssp
expect_usage_error_of "without a parameter-server backend" "$arbench" train --np 2 --ps-servers 1 --backends arcoll
echo "parameter server: all checks passed"
